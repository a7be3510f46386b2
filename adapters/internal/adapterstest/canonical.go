package adapterstest

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
)

// HeaderReads are the response fields a CanonicalHarness read, by the
// names as the standards spell them ("X-RateLimit-Remaining"), with the
// framework's own getters.
type HeaderReads struct {
	Status int
	// Handler is what the route's handler read of its response, nil when
	// it did not run.
	Handler map[string]string
	// After is what a middleware mounted before the limiter read once the
	// rest of the chain had returned.
	After map[string]string
	// Recorder is what the framework's test recorder holds.
	Recorder map[string]string
}

// CanonicalHarness serves one request through a framework, reading the
// response's fields as an application does (RunCanonical).
type CanonicalHarness interface {
	// ServeOne sends req to an app that mounts, with the framework's Use,
	// a middleware reading names after the rest of the chain, then the
	// adapter's middleware of f, and routes GET / to a handler that reads
	// names and answers 200 Body; it returns what each read, with the
	// framework's own getter (http.Header.Get, Fiber's GetRespHeader), and
	// what the framework's test recorder holds (httptest, Fiber's Test).
	ServeOne(t testing.TB, f *httplimit.Flow, req Request, names []string) HeaderReads
}

// canonicalCase is a flow and the requests that RunCanonical sends it, in
// order, each with the fields it expects.
type canonicalCase struct {
	name  string
	flow  func(t testing.TB) *httplimit.Flow
	steps []canonicalStep
}

type canonicalStep struct {
	path   string
	accept string
	status int
	fields map[string]string // name as spelled: exact value, or "" for any
}

// Field values of canonicalStep.fields.
const anyValue = ""

// The fields of each family, as the standards spell them.
var (
	xFields      = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	draft6Fields = []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}
	draft10      = []string{"RateLimit", "RateLimit-Policy"}
)

// fieldsOf returns the fields of the families given, any value, plus more.
func fieldsOf(families [][]string, more ...string) map[string]string {
	m := map[string]string{}
	for _, fam := range families {
		for _, f := range fam {
			m[f] = anyValue
		}
	}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i]] = more[i+1]
	}
	return m
}

// canonicalCases are the flows whose every field RunCanonical reads: the
// default fields (the writer's fast paths), every family of one layer and
// of two, a refusal with problem details, the quota endpoint and a deny
// list.
func canonicalCases() []canonicalCase {
	all := headers.Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	one := func(opts ...httplimit.Option) func(t testing.TB) *httplimit.Flow {
		return func(t testing.TB) *httplimit.Flow {
			return NewFlow(t, clockstore.At(NewStore(t), T0), []httplimit.Layer{{Policy: fixed("one", 1)}}, nil, opts...)
		}
	}
	two := func(t testing.TB) *httplimit.Flow {
		return NewFlow(t, clockstore.At(NewStore(t), T0), []httplimit.Layer{
			{Policy: fixed("a", 1)}, {Policy: fixed("b", 5)}}, nil, httplimit.WithHeaders(all))
	}
	json := "application/json"
	def := [][]string{xFields, draft6Fields}
	every := [][]string{xFields, draft6Fields, draft10}
	deny, err := access.NewList(access.Entry{Prefix: netip.MustParsePrefix("0.0.0.0/0")}, access.Entry{Prefix: netip.MustParsePrefix("::/0")})
	if err != nil {
		panic(err)
	}
	return []canonicalCase{
		{name: "default fields", flow: one(), steps: []canonicalStep{
			{path: "/", status: 200, fields: fieldsOf(def, "X-RateLimit-Remaining", "0", "RateLimit-Remaining", "0")},
			{path: "/", status: 429, fields: fieldsOf(def, "Retry-After", anyValue, "Content-Type", json)},
		}},
		{name: "every field, one layer", flow: one(httplimit.WithHeaders(all)), steps: []canonicalStep{
			{path: "/", status: 200, fields: fieldsOf(every)},
			{path: "/", status: 429, fields: fieldsOf(every, "Retry-After", anyValue, "Content-Type", json)},
		}},
		{name: "every field, two layers", flow: two, steps: []canonicalStep{
			{path: "/", status: 200, fields: fieldsOf(every)},
			{path: "/", status: 429, fields: fieldsOf(every, "Retry-After", anyValue, "Content-Type", json)},
		}},
		{name: "problem details", flow: one(httplimit.WithProblemDetails()), steps: []canonicalStep{
			{path: "/", accept: "application/problem+json", status: 200, fields: fieldsOf(def)},
			{path: "/", accept: "application/problem+json", status: 429,
				fields: fieldsOf(def, "Retry-After", anyValue, "Content-Type", "application/problem+json")},
		}},
		{name: "quota endpoint", flow: one(httplimit.WithQuota("/rate_limit")), steps: []canonicalStep{
			{path: "/rate_limit", status: 200, fields: fieldsOf(nil, "Content-Type", json, "Cache-Control", "no-store")},
		}},
		{name: "deny list", flow: one(httplimit.WithDenyList(deny)), steps: []canonicalStep{
			{path: "/", status: 403, fields: fieldsOf(nil, "Content-Type", json)},
		}},
	}
}

// RunCanonical checks that every field the flow writes is found by the
// framework's own header getter, under the name as the standards spell
// it: in the handler, in a middleware around the limiter, and in the
// framework's test recorder, for requests allowed and refused. A field
// set in a net/http header map under a name that is not canonical
// ("X-RateLimit-Remaining" and not "X-Ratelimit-Remaining") is found by
// none of them.
func RunCanonical(t *testing.T, h CanonicalHarness) {
	for _, c := range canonicalCases() {
		t.Run(c.name, func(t *testing.T) {
			f := c.flow(t)
			for i, st := range c.steps {
				names := make([]string, 0, len(st.fields))
				for n := range st.fields {
					names = append(names, n)
				}
				req := Request{Method: http.MethodGet, Path: st.path, RemoteAddr: peerA}
				if st.accept != "" {
					req.Header = http.Header{"Accept": {st.accept}}
				}
				got := h.ServeOne(t, f, req, names)
				require.Equal(t, st.status, got.Status, "request %d: status", i)
				reads := map[string]map[string]string{"after the chain": got.After, "recorder": got.Recorder}
				if st.status == http.StatusOK && st.path == "/" {
					reads["handler"] = got.Handler
				} else {
					assert.Nil(t, got.Handler, "request %d: the handler ran", i)
				}
				for where, read := range reads {
					for name, want := range st.fields {
						v := read[name]
						if want == anyValue {
							assert.NotEmpty(t, v, "request %d, %s: %s", i, where, name)
						} else {
							assert.Equal(t, want, v, "request %d, %s: %s", i, where, name)
						}
					}
				}
			}
		})
	}
}

// ReadFields returns the value of each of names by get, the empty ones
// included.
func ReadFields(names []string, get func(string) string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = get(n)
	}
	return m
}
