package openapi

import (
	"context"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// extension is the name of the operation extension that lists the limits
// of an operation.
const extension = "x-ratelimit"

// limit is one item of an x-ratelimit list: a layer that applies to the
// operation. The package doc documents every member.
type limit struct {
	Name       string  `json:"name"`
	Algorithm  string  `json:"algorithm"`
	Limit      int64   `json:"limit"`
	Window     float64 `json:"window"`
	Burst      int64   `json:"burst,omitempty"`
	Cost       int64   `json:"cost"`
	Key        string  `json:"key"`
	Counts     string  `json:"counts,omitempty"`
	Lockout    float64 `json:"lockout,omitempty"`
	FailClosed float64 `json:"fail_closed,omitempty"`
	Lease      float64 `json:"lease,omitempty"`
}

// countsNames are the counts members of the layers that do not count
// every request, by their Counts.
var countsNames = map[httplimit.Counts]string{
	httplimit.CountFailures:  "failures",
	httplimit.CountSuccesses: "successes",
	httplimit.CountReported:  "reported",
}

// describer is what Describe and Markdown read of a Flow.
type describer struct {
	flow  flowDesc
	kinds []string // of each layer's key, by layer
}

// newDescriber reads flow.
func newDescriber(flow *httplimit.Flow) (*describer, error) {
	if flow == nil {
		return nil, errorf("nil flow")
	}
	d := &describer{flow: describeFlow(flow)}
	for _, ly := range d.flow.Layers {
		d.kinds = append(d.kinds, keyKind(ly.Key))
	}
	return d, nil
}

// limitsOf returns the limits of the layers that apply to a request of
// method to path, a path template ("/users/{id}"), in layer order; none
// for the flow's quota endpoint, which the flow answers before any layer.
func (d *describer) limitsOf(method, path string) []limit {
	method = strings.ToUpper(method)
	if d.isQuota(method, path) {
		return nil
	}
	var out []limit
	for i, ly := range d.flow.Layers {
		if !ly.Applies(&syntheticRequest{method: method, path: path}) {
			continue
		}
		p := ly.Policy
		l := limit{
			Name: p.Name, Algorithm: string(p.Algorithm), Limit: p.Limit,
			Window: p.Window.Seconds(), Cost: 1, Key: d.kinds[i],
			Lockout: p.Lockout.Seconds(), FailClosed: p.FailClosed.Seconds(),
			Lease: p.Lease.Seconds(),
		}
		l.Counts = countsNames[ly.Counts]
		if p.Algorithm == core.TokenBucket || p.Algorithm == core.LeakyBucket {
			l.Burst = p.Burst
			if l.Burst == 0 {
				l.Burst = p.Limit
			}
		}
		if ly.Cost != nil {
			l.Cost = costOf(ly.Cost, method, path)
		}
		out = append(out, l)
	}
	return out
}

// isQuota reports whether a request of method to path asks the flow's
// quota endpoint, matched as the flow matches it (case and a trailing
// slash aside).
func (d *describer) isQuota(method, path string) bool {
	if d.flow.Quota == "" || (method != http.MethodGet && method != http.MethodHead) {
		return false
	}
	return sameRoute(d.flow.Quota, path)
}

// sameRoute reports whether two literal paths are one route.
func sameRoute(a, b string) bool {
	trim := func(s string) string {
		if len(s) > 1 {
			return strings.TrimSuffix(s, "/")
		}
		return s
	}
	return strings.EqualFold(trim(a), trim(b))
}

// costOf is what cost says a request of method to path costs; 1 when it
// panics or says less (the flow would refuse such a request with 500).
func costOf(cost func(keyfuncs.Request) int64, method, path string) (n int64) {
	defer func() {
		if recover() != nil {
			n = 1
		}
	}()
	return max(1, cost(&syntheticRequest{method: method, path: path}))
}

// syntheticRequest is a request of a method to a path, from a documented
// peer, with nothing else: what a layer's matching, cost and key functions
// are asked about. probe records what a key function reads of it.
type syntheticRequest struct {
	method, path string
	peer         string
	probe        *keyProbe
	blank        bool // the headers are empty
}

// keyProbe is what a key function read of a syntheticRequest.
type keyProbe struct {
	headers       []string
	peer, context bool
}

func (r *syntheticRequest) RemoteAddr() string {
	if r.probe != nil {
		r.probe.peer = true
	}
	return r.peer
}

func (r *syntheticRequest) Header(name string) string {
	if r.probe == nil {
		return ""
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	if name == "X-Forwarded-For" || name == "Forwarded" {
		// The request comes from its peer through no proxy. A ClientIP
		// that trusts none looks for these, to report the first it meets:
		// that is no key read, and a probe must not spend the report.
		return ""
	}
	r.probe.headers = append(r.probe.headers, name)
	if r.blank {
		return ""
	}
	return "Bearer probe" // an API key, and a bearer token too
}

func (r *syntheticRequest) HeaderValues(name string) []string {
	if r.probe != nil {
		r.probe.headers = append(r.probe.headers, textproto.CanonicalMIMEHeaderKey(name))
	}
	return nil
}

func (r *syntheticRequest) Method() string { return r.method }
func (r *syntheticRequest) Route() string  { return r.path }
func (r *syntheticRequest) Unrouted() bool { return false }
func (r *syntheticRequest) Path() string   { return r.path }

func (r *syntheticRequest) Context() context.Context {
	if r.probe != nil {
		r.probe.context = true
	}
	return context.Background()
}

// keyKind tells the kind of a key function by calling it on a synthetic
// request (twice: with headers, and without) and
// reading what it read and what it returned: "ip" for the
// client's address (keyfuncs.ClientIP), "static" (keyfuncs.Static),
// "header:<Name>" for an API key or bearer token in a header
// (keyfuncs.APIKeyHeader), "route"
// (keyfuncs.Route), their Compose joined
// with "+" ("route+ip"), and "custom" for anything else (a user ID, a
// FirstOf, a function of your own).
func keyKind(key keyfuncs.Func) (kind string) {
	if key == nil {
		return "ip" // the flow's client address
	}
	defer func() {
		if recover() != nil {
			kind = "custom"
		}
	}()
	var p, blank keyProbe
	k, err := key(&syntheticRequest{method: http.MethodGet, path: "/", peer: "192.0.2.1:1234", probe: &p})
	if err != nil || k == "" || p.context {
		return "custom" // a user ID, or a function of its own
	}
	if k2, err := key(&syntheticRequest{method: http.MethodGet, path: "/", peer: "192.0.2.1:1234", probe: &blank, blank: true}); err == nil && prefixes(k2) != prefixes(k) {
		return "custom" // a FirstOf: another key without the header
	}
	var kinds []string
	for part := range strings.SplitSeq(k, "|") {
		prefix, _, _ := strings.Cut(part, ":")
		switch {
		case prefix == "ip" && p.peer:
			kinds = append(kinds, "ip")
		case prefix == "static":
			kinds = append(kinds, "static")
		case prefix == "route":
			kinds = append(kinds, "route")
		case prefix == "key" && len(p.headers) == 1:
			kinds = append(kinds, "header:"+p.headers[0])
		default:
			return "custom"
		}
	}
	return strings.Join(kinds, "+")
}

// prefixes returns the kinds of the parts of a key: "route|ip" for
// "route:GET /|ip:192.0.2.1".
func prefixes(key string) string {
	var out []string
	for part := range strings.SplitSeq(key, "|") {
		prefix, _, _ := strings.Cut(part, ":")
		out = append(out, prefix)
	}
	return strings.Join(out, "|")
}
