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

// FieldReads records, for RunCanonical, what an app's middleware and
// handler read of the response's fields, by the names as the standards
// spell them ("X-RateLimit-Remaining"), with the framework's own getter.
type FieldReads struct {
	names          []string
	handler, after map[string]string // nil: not read
}

// Handler records what the route's handler reads with get, before it
// answers.
func (r *FieldReads) Handler(get func(name string) string) { r.handler = readFields(r.names, get) }

// After records what a middleware mounted before the limiter reads with
// get once the rest of the chain has returned.
func (r *FieldReads) After(get func(name string) string) { r.after = readFields(r.names, get) }

// CanonicalApp is a framework's part of RunCanonical. It sends req, as
// the framework's tests do, to a new app that mounts, with the
// framework's Use, a middleware calling read.After once the rest of the
// chain has returned, then the adapter's middleware of f, and routes
// GET / to a handler that calls read.Handler and answers 200 Body; both
// pass the framework's own getter of the response's fields
// (http.Header.Get, Fiber's GetRespHeader). It returns the status and the
// getter of the fields the framework's test recorder holds (an httptest
// recorder, the response of Fiber's Test).
type CanonicalApp func(t testing.TB, f *httplimit.Flow, req Request, read *FieldReads) (status int, recorder func(name string) string)

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
func RunCanonical(t *testing.T, app CanonicalApp) {
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
				read := &FieldReads{names: names}
				status, recorder := app(t, f, req, read)
				require.Equal(t, st.status, status, "request %d: status", i)
				reads := map[string]map[string]string{"after the chain": read.after, "recorder": readFields(names, recorder)}
				if st.status == http.StatusOK && st.path == "/" {
					reads["handler"] = read.handler
				} else {
					assert.Nil(t, read.handler, "request %d: the handler ran", i)
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

// readFields returns the value of each of names by get, the empty ones
// included.
func readFields(names []string, get func(string) string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = get(n)
	}
	return m
}
