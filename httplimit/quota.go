package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
)

// WithQuota makes the flow answer GET and HEAD requests to path itself,
// as GitHub's GET /rate_limit does: with the caller's quota under each of
// its layers, as JSON, spending nothing (core.Limiter.Peek). It answers
// before any skip and never calls a handler, so no route needs
// registering; other methods on path are limited as any request. path is
// matched as a Layer route is, and may be neither "/" nor hold parameters
// or wildcards.
//
// The caller is keyed as the flow keys it, so that no forged header shows
// another client's quota, and a deny-listed or banned caller gets 403.
// Shown are the layers whose key for this request names a client (an
// address, an API key, a user), and the layers named in show; New refuses
// a name no layer has. The endpoint is itself limited (10 a second per
// address, bursts of 20, in process), answers 503 when the store cannot
// be read, and sends Cache-Control: no-store. docs/quota.md tells the rest.
func WithQuota(path string, show ...string) Option {
	return func(c *config) error {
		rt, err := parseRoute(path)
		if err != nil {
			return invalid("WithQuota", err.Error())
		}
		if strings.ContainsAny(path, "{}:*") {
			return invalid("WithQuota", "the path "+path+" holds a parameter or wildcard")
		}
		if strings.Trim(path, "/") == "" {
			return invalid("WithQuota", "the path / would answer every GET of the API's root")
		}
		c.quota = &rt
		c.quotaShow = append([]string(nil), show...)
		return nil
	}
}

// quotaEndpoint is a Flow's WithQuota.
type quotaEndpoint struct {
	route *route
	// last is the path's last segment, lower case: a path that holds it
	// in no case, and no '%' that could spell it, is not the endpoint's.
	last  string
	guard *quotaGuard
	// show[i] says that layer i is shown whatever its key (WithQuota's
	// show).
	show []bool
}

// newQuotaEndpoint returns the endpoint of rt, nil when rt is, showing
// the layers named in show (of the layers named names) whatever their key.
func newQuotaEndpoint(rt *route, show, names []string) (*quotaEndpoint, error) {
	if rt == nil {
		return nil, nil
	}
	shown := make([]bool, len(names))
	for _, s := range show {
		i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, s) })
		if i < 0 {
			return nil, invalid("WithQuota", fmt.Sprintf("no layer is named %q", s))
		}
		shown[i] = true
	}
	p := strings.TrimRight(rt.pattern, "/")
	last := strings.ToLower(p[strings.LastIndexByte(p, '/')+1:])
	return &quotaEndpoint{route: rt, last: last, guard: newQuotaGuard(time.Now()), show: shown}, nil
}

// is reports whether r asks the quota endpoint.
func (q *quotaEndpoint) is(r keyfuncs.Request) bool {
	if m := r.Method(); m != http.MethodGet && m != http.MethodHead {
		return false
	}
	// Every GET asks: spare the ones that cannot match the route
	// matcher's work (a path normalized, 1.3 µs and 1.8 kB on the heap
	// when it was asked every time).
	p := r.Path()
	if p == "" {
		p = r.Route()
	}
	if strings.IndexByte(p, '%') < 0 && !containsFold(p, q.last) {
		return false
	}
	sc := scratches.Get().(*scratch)
	sc.m.init(r)
	ok := sc.m.matches(q.route)
	sc.m.reset()
	scratches.Put(sc)
	return ok
}

// quotaLayer is one layer of the quota endpoint's answer.
type quotaLayer struct {
	Name       string   `json:"name"`
	Algorithm  string   `json:"algorithm"`
	Limit      int64    `json:"limit"`
	Remaining  int64    `json:"remaining"`
	Used       int64    `json:"used"`
	Reset      int64    `json:"reset"`
	ResetAfter int64    `json:"reset_after"`
	Window     float64  `json:"window"`
	RetryAfter int64    `json:"retry_after,omitempty"`
	LockedOut  bool     `json:"locked_out,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	Routes     []string `json:"routes,omitempty"`
}

// answerQuota answers a request to the quota endpoint: refused past the
// guard's rate, refused as on any route when listed or banned, else with
// the caller's quota.
func (f *Flow) answerQuota(st *state, r keyfuncs.Request, w Response) {
	st.in = inKey
	addr, err := f.clientIP.Key(r)
	if err != nil || addr == "" {
		addr = "unknown" // no address: all such callers share one guard
	}
	if ok, retry := f.quota.guard.allow(addr, time.Now()); !ok {
		st.in = inResponder
		w.Set("Retry-After", itoa(max(1, ceilSeconds(retry))))
		_ = st.guard(w).Write(http.StatusTooManyRequests, "application/json", []byte(`{"error":"too many quota requests"}`))
		return
	}
	var reqs [limits.MaxLayers]core.Request // by layer; no Key: not shown
	var keys [limits.MaxLayers]string
	n := 0
	st.in = inKey
	for i := range f.layers.layers {
		key, err := f.layers.layers[i].key(r)
		if err != nil || key == "" {
			continue // no key from this request: nothing to show
		}
		reqs[i].Key, keys[n] = key, key
		n++
	}
	if f.allow != nil || f.deny403 != nil {
		if l, e := f.checkKeys(st, r, keys[:n]); l == denyListed {
			f.reportKeys(keys[:n], l)
			f.forbid(st, r, w, e)
			return
		}
	}
	if f.repBans != nil {
		if ak, err := f.clientIP.Key(r); err == nil && f.repBanned(st, r, w, firstKey(keys[:n]), ak) {
			return // banned by the reputation: as deny-listed
		}
	}
	// Only the caller's own layers, and those WithQuota names: a shared
	// one would tell every caller what the others spend. Dropped after the
	// lists, which match every key.
	shown := 0
	for i := range f.layers.layers {
		if reqs[i].Key == "" {
			continue
		}
		if f.quota.show[i] || callersKey(reqs[i].Key) {
			shown++
		} else {
			reqs[i].Key = ""
		}
	}
	f.writeQuota(st, r, w, reqs[:len(f.layers.layers)], shown)
}

// writeQuota answers r with the quota of the shown layers of reqs (one
// Request per layer, those with a Key), read with Peek; 503 when the
// store cannot be read.
func (f *Flow) writeQuota(st *state, r keyfuncs.Request, w Response, reqs []core.Request, shown int) {
	ctx := r.Context()
	st.in = inLimiter
	var ds [limits.MaxLayers]core.Decision
	if err := f.limiter.Peek(ctx, time.Time{}, reqs, ds[:len(reqs)]); err != nil {
		if ctx.Err() != nil {
			f.fail(st, r, w, err) // the client left
			return
		}
		st.in = inErrorHandler
		f.onError(r, err)
		st.in = inResponder
		w.Set("Retry-After", "1")
		w.Set("Cache-Control", "no-store")
		_ = st.guard(w).Write(http.StatusServiceUnavailable, "application/json", []byte(`{"error":"quota unavailable"}`))
		return
	}
	out := struct {
		Layers []quotaLayer `json:"layers"`
	}{Layers: make([]quotaLayer, 0, shown)}
	now := time.Now()
	for i := range reqs {
		if reqs[i].Key != "" {
			out.Layers = append(out.Layers, quotaLayer{})
			out.Layers[len(out.Layers)-1].fill(&ds[i], &f.layers.layers[i], now)
		}
	}
	body, err := json.Marshal(out)
	if err != nil { // cannot happen: plain fields
		f.fail(st, r, w, err)
		return
	}
	st.in = inResponder
	w.Set("Cache-Control", "no-store")
	_ = st.guard(w).Write(http.StatusOK, "application/json", body)
}

// fill sets ql to what d, ly's decision peeked at now, says.
func (ql *quotaLayer) fill(d *core.Decision, ly *flowLayer, now time.Time) {
	ql.Name, ql.Algorithm = d.Policy.Name, string(d.Policy.Algorithm)
	ql.Limit, ql.Remaining, ql.Used = d.Limit, d.Remaining, max(0, d.Limit-d.Remaining)
	ql.ResetAfter = ceilSeconds(d.ResetAfter)
	ql.Reset = now.Add(d.ResetAfter).Add(time.Second - 1).Unix()
	ql.Window = d.Policy.Window.Seconds()
	if !d.Allowed {
		ql.RetryAfter = max(1, ceilSeconds(d.RetryAfter))
	}
	ql.LockedOut = d.LockedOut
	ql.Methods = ly.methods
	for _, rt := range ly.routes {
		ql.Routes = append(ql.Routes, rt.pattern)
	}
}

// clientKinds are the prefixes of the keyfuncs keys that name a client:
// an address, an API key, a user.
var clientKinds = [...]string{"ip:", "key:", "user:"}

// callersKey reports whether key, a layer's key for the caller, names the
// caller: it, or a part of it that keyfuncs.Compose joined with "|", is a
// client's key (clientKinds).
func callersKey(key string) bool {
	for more := true; more; {
		var part string
		part, key, more = strings.Cut(key, "|")
		for _, kind := range clientKinds {
			if strings.HasPrefix(part, kind) {
				return true
			}
		}
	}
	return false
}

// containsFold reports whether s holds lower, which is lower case, in any
// ASCII case.
func containsFold(s, lower string) bool {
	for i := 0; i+len(lower) <= len(s); i++ {
		j := 0
		for j < len(lower) {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lower[j] {
				break
			}
			j++
		}
		if j == len(lower) {
			return true
		}
	}
	return false
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
