package adapterstest

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Run runs the whole suite against h.
func Run(t *testing.T, h Harness) {
	t.Run("Matrix", func(t *testing.T) { RunMatrix(t, h) })
	t.Run("Spoofing", func(t *testing.T) { RunSpoofing(t, h) })
	t.Run("RouteKeys", func(t *testing.T) { RunRouteKeys(t, h) })
	t.Run("Pacing", func(t *testing.T) { RunPacing(t, h) })
}

// rateFields are every field the flow may write; a step lists exactly
// those it expects, and the others must be absent.
var rateFields = []string{
	"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset",
	"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset",
	"Ratelimit", "Ratelimit-Policy", "Retry-After",
}

// limited is the default set of fields of an allowed decision: limit,
// remaining, and the reset delay in seconds. X-RateLimit-Reset, the Unix
// second at which the quota is whole, is written from the real clock:
// "now+N" stands for the second N after the request (see checkStep).
func limited(limit, remaining, reset int64) map[string]string {
	l, r, s := strconv.FormatInt(limit, 10), strconv.FormatInt(remaining, 10), strconv.FormatInt(reset, 10)
	return map[string]string{
		"X-Ratelimit-Limit":     l,
		"X-Ratelimit-Remaining": r,
		"X-Ratelimit-Reset":     nowPlus + s,
		"Ratelimit-Limit":       l,
		"Ratelimit-Remaining":   r,
		"Ratelimit-Reset":       s,
	}
}

// nowPlus prefixes an expected X-RateLimit-Reset: "now+N".
const nowPlus = "now+"

// denied is limited plus Retry-After.
func denied(limit, remaining, reset, retry int64) map[string]string {
	m := limited(limit, remaining, reset)
	m["Retry-After"] = strconv.FormatInt(retry, 10)
	return m
}

// Exact bodies of the default handlers.
func exceededBody(n string) string {
	unit := " seconds."
	if n == "1" {
		unit = " second."
	}
	return `{"error":"rate_limit_exceeded","message":"Too many requests, retry after ` + n + unit + `","retry_after_seconds":` + n + `}`
}

func unavailableBody(n string) string {
	return `{"error":"rate_limit_unavailable","message":"Rate limiting is temporarily unavailable, retry after ` + n + ` seconds.","retry_after_seconds":` + n + `}`
}

const (
	keyMissingBody = `{"error":"rate_limit_key_missing","message":"The request does not identify its client."}`
	internalBody   = `{"error":"rate_limit_error","message":"Internal server error."}`
	canceledBody   = `{"error":"request_canceled","message":"The client closed the request."}`
)

// statusClientClosed is the status of a request whose client left: 499,
// nginx's "client closed request".
const statusClientClosed = 499

// Peers used by the suite.
const (
	peerA = "192.0.2.1:1234"
	peerB = "198.51.100.9:4321"
)

// step is one request and what must come back.
type step struct {
	req         Request
	status      int
	body        string
	contentType string            // checked when set
	fields      map[string]string // exactly the rate-limit fields expected
	extra       map[string]string // other fields checked
}

type matrixCase struct {
	name  string
	build func(t testing.TB, errs *errorRecorder) *Spec
	steps []step
	hits  int64                     // handler runs expected after all steps
	errs  func(*testing.T, []error) // checks the errors the flow reported; nil: none
}

func fixed(name string, limit int64) core.Policy {
	return core.Policy{Name: name, Algorithm: core.FixedWindow, Limit: limit, Window: time.Minute}
}

// global builds a Spec with one limiter on every request and the routes
// GET / and POST /upload.
func global(t testing.TB, store core.Store, p core.Policy, lopts []core.Option, opts ...httplimit.Option) *Spec {
	return globalLayer(t, store, httplimit.Layer{Policy: p}, lopts, opts...)
}

// globalLayer is global for a layer with its own Key or Cost.
func globalLayer(t testing.TB, store core.Store, ly httplimit.Layer, lopts []core.Option, opts ...httplimit.Option) *Spec {
	return &Spec{
		Global: []Mount{NewMount(t, store, ly, lopts, opts...)},
		Routes: []Route{{Method: "GET", Path: "/"}, {Method: "POST", Path: "/upload"}},
	}
}

func get(peer string) Request { return Request{Method: "GET", Path: "/", RemoteAddr: peer} }

func wantErrs(targets ...error) func(*testing.T, []error) {
	return func(t *testing.T, errs []error) {
		t.Helper()
		require.NotEmpty(t, errs, "error handler not called; want errors wrapping %v", targets)
		for _, err := range errs {
			for _, target := range targets {
				assert.ErrorIs(t, err, target)
			}
		}
	}
}

var matrix = []matrixCase{
	{
		name: "fixed window counts down then denies",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			return global(t, NewStore(t), fixed("global", 2), nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: limited(2, 1, 55)},
			{req: get(peerA), status: 200, body: Body, fields: limited(2, 0, 55)},
			{req: get(peerA), status: 429, body: exceededBody("55"), contentType: "application/json", fields: denied(2, 0, 55, 55)},
		},
		hits: 2,
	},
	{
		name: "token bucket reset and one-second retry",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			p := core.Policy{Name: "tb", Algorithm: core.TokenBucket, Limit: 10, Window: 10 * time.Second, Burst: 2}
			return global(t, NewStore(t), p, nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: limited(2, 1, 1)},
			{req: get(peerA), status: 200, body: Body, fields: limited(2, 0, 2)},
			{req: get(peerA), status: 429, body: exceededBody("1"), contentType: "application/json", fields: denied(2, 0, 2, 1)},
		},
		hits: 2,
	},
	{
		name: "structured fields only",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			return global(t, NewStore(t), fixed("api", 2), nil, e.option(), httplimit.WithHeaders(headers.Config{Structured: true}))
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: map[string]string{
				"Ratelimit": `"api";r=1;t=55`, "Ratelimit-Policy": `"api";q=2;w=60`,
			}},
			{req: get(peerA), status: 200, body: Body, fields: map[string]string{
				"Ratelimit": `"api";r=0;t=55`, "Ratelimit-Policy": `"api";q=2;w=60`,
			}},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: map[string]string{
				"Ratelimit": `"api";r=0;t=55`, "Ratelimit-Policy": `"api";q=2;w=60`,
			}},
		},
		hits: 2,
	},
	{
		name: "skipped requests are neither counted nor told",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			skip := httplimit.WithSkip(func(r keyfuncs.Request) bool { return r.Header("X-Internal") == "yes" })
			return global(t, NewStore(t), fixed("global", 1), nil, e.option(), skip)
		},
		steps: []step{
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerA, Header: http.Header{"X-Internal": {"yes"}}}, status: 200, body: Body},
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerA, Header: http.Header{"X-Internal": {"yes"}}}, status: 200, body: Body},
			{req: get(peerA), status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerA, Header: http.Header{"X-Internal": {"yes"}}}, status: 200, body: Body},
		},
		hits: 4,
	},
	{
		name: "per-request cost",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			cost := func(r keyfuncs.Request) int64 {
				if r.Method() == "POST" {
					return 3
				}
				return 1
			}
			return globalLayer(t, NewStore(t), httplimit.Layer{Policy: fixed("global", 5), Cost: cost}, nil, e.option())
		},
		steps: []step{
			{req: Request{Method: "POST", Path: "/upload", RemoteAddr: peerA}, status: 200, body: Body, fields: limited(5, 2, 55)},
			{req: Request{Method: "POST", Path: "/upload", RemoteAddr: peerA}, status: 429, body: exceededBody("55"), fields: denied(5, 2, 55, 55)},
			{req: get(peerA), status: 200, body: Body, fields: limited(5, 1, 55)},
		},
		hits: 2,
	},
	{
		name: "invalid cost is a 500, never a panic",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			cost := func(r keyfuncs.Request) int64 {
				if r.Method() == "POST" {
					return 6 // above the capacity
				}
				return 0
			}
			return globalLayer(t, NewStore(t), httplimit.Layer{Policy: fixed("global", 5), Cost: cost}, nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 500, body: internalBody, contentType: "application/json"},
			{req: Request{Method: "POST", Path: "/upload", RemoteAddr: peerA}, status: 500, body: internalBody},
		},
		errs: func(t *testing.T, errs []error) {
			require.Len(t, errs, 2, "errors %v", errs)
			assert.ErrorIs(t, errs[0], core.ErrInvalidOption)
			assert.ErrorIs(t, errs[1], core.ErrInvalidOption)
		},
	},
	{
		name: "clients do not share quotas",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			return global(t, NewStore(t), fixed("global", 1), nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
			{req: get(peerB), status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: get(peerB), status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
		},
		hits: 2,
	},
	{
		name: "store down, fail open: pass without fields",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			return global(t, FailingStore{}, fixed("global", 1), nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body},
			{req: get(peerA), status: 200, body: Body},
		},
		hits: 2,
		errs: wantErrs(limits.ErrStore, ErrDown),
	},
	{
		name: "store down, fail closed: 503 with Retry-After",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			p := fixed("global", 1)
			p.FailClosed = 2 * time.Second
			return global(t, FailingStore{}, p, nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 503, body: unavailableBody("2"), contentType: "application/json",
				fields: map[string]string{"Retry-After": "2"}},
		},
		errs: wantErrs(limits.ErrStore, ErrDown),
	},
	{
		name: "store down, fallback store: real decisions and fields",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			p := fixed("global", 1)
			p.FailClosed = time.Second
			lopts := []core.Option{core.WithFallback(clockstore.At(NewStore(t), T0))}
			return global(t, FailingStore{}, p, lopts, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
		},
		hits: 1,
		errs: wantErrs(limits.ErrStore, ErrDown),
	},
	{
		name: "no key in request: 400",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			return globalLayer(t, NewStore(t), httplimit.Layer{Policy: fixed("global", 1), Key: MustKeyFunc(t)(keyfuncs.APIKeyHeader("X-Api-Key", nil))}, nil, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 400, body: keyMissingBody, contentType: "application/json"},
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerA, Header: http.Header{"X-Api-Key": {"k1"}}}, status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerB, Header: http.Header{"X-Api-Key": {"k1"}}}, status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
		},
		hits: 1,
		errs: func(t *testing.T, errs []error) {
			require.Len(t, errs, 1, "errors %v", errs)
			assert.ErrorIs(t, errs[0], keyfuncs.ErrNoKey)
		},
	},
	{
		name: "strict limiter on POST /login under a global one",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			store := NewStore(t)
			return &Spec{
				Global: []Mount{NewMount(t, store, httplimit.Layer{Policy: fixed("global", 3)}, nil, e.option())},
				Routes: []Route{
					{Method: "GET", Path: "/"},
					{Method: "POST", Path: "/login", Limits: []Mount{NewMount(t, store, httplimit.Layer{Policy: fixed("login", 1)}, nil, e.option())}},
				},
			}
		},
		steps: []step{
			{req: Request{Method: "POST", Path: "/login", RemoteAddr: peerA}, status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: Request{Method: "POST", Path: "/login", RemoteAddr: peerA}, status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
			{req: get(peerA), status: 200, body: Body, fields: limited(3, 0, 55)},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: denied(3, 0, 55, 55)},
			{req: Request{Method: "POST", Path: "/login", RemoteAddr: peerB}, status: 200, body: Body, fields: limited(1, 0, 55)},
		},
		hits: 3,
	},
	{
		name: "custom responder",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			deny := httplimit.WithResponder(func(_ keyfuncs.Request, w httplimit.Response, d core.Decision, _ error) {
				w.Set("X-Denied-By", d.Policy.Name)
				_ = w.Write(http.StatusTeapot, "text/plain", []byte("retry in "+d.RetryAfter.String()))
			})
			return global(t, NewStore(t), fixed("global", 1), nil, e.option(), deny)
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: get(peerA), status: 418, body: "retry in 55s", contentType: "text/plain", fields: denied(1, 0, 55, 55),
				extra: map[string]string{"X-Denied-By": "global"}},
		},
		hits: 1,
	},
}

// RunMatrix runs the behaviour table.
func RunMatrix(t *testing.T, h Harness) {
	for _, tc := range matrix {
		t.Run(tc.name, func(t *testing.T) {
			var errs errorRecorder
			spec := tc.build(t, &errs)
			app := h.Build(t, spec)
			for i, s := range tc.steps {
				before := time.Now()
				res := app.Do(t, s.req)
				checkStep(t, i, s, res, before, time.Now())
			}
			assert.Equal(t, tc.hits, spec.Hits(), "handler runs")
			if tc.errs == nil {
				assert.Empty(t, errs.all(), "errors reported")
			} else {
				tc.errs(t, errs.all())
			}
		})
	}
}

// checkStep checks the response to step i, sent between before and after:
// its status, body and Content-Type, exactly the rate-limit fields s
// expects, and its extra fields.
func checkStep(t *testing.T, i int, s step, res Response, before, after time.Time) {
	t.Helper()
	assert.Equal(t, s.status, res.Status, "step %d: status (body %q)", i, res.Body)
	assert.Equal(t, s.body, res.Body, "step %d: body", i)
	if s.contentType != "" {
		assert.Equal(t, s.contentType, res.Header.Get("Content-Type"), "step %d: Content-Type", i)
	}
	for _, f := range rateFields {
		got := res.Header.Values(f)
		want, ok := s.fields[f]
		if !ok {
			assert.Empty(t, got, "step %d: %s", i, f)
			continue
		}
		if !assert.Len(t, got, 1, "step %d: %s", i, f) {
			continue
		}
		if n, ok := strings.CutPrefix(want, nowPlus); ok {
			checkNowPlus(t, fmt.Sprintf("step %d: %s", i, f), got[0], n, before, after)
		} else {
			assert.Equal(t, want, got[0], "step %d: %s", i, f)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.extra)) {
		assert.Equal(t, s.extra[k], res.Header.Get(k), "step %d: %s", i, k)
	}
}

// checkNowPlus checks got, an X-RateLimit-Reset: the Unix second, rounded
// up, n seconds after a decision made at T0, the store's time, or, for a
// fallback's decision, made between before and after by the real clock.
func checkNowPlus(t *testing.T, what, got, n string, before, after time.Time) {
	t.Helper()
	reset, err := strconv.ParseInt(n, 10, 64)
	require.NoError(t, err, "%s: want %q", what, nowPlus+n)
	sec, err := strconv.ParseInt(got, 10, 64)
	if assert.NoError(t, err, "%s: %q", what, got) {
		// The store decides at T0 and says so (core.Store.Take returns the
		// time it decided at): the flow writes the reset from that time. A
		// fallback store, which decides by the real clock, says nothing:
		// the flow reads the clock.
		fromT0 := sec >= T0.Unix()+reset && sec <= T0.Unix()+reset+1
		fromNow := sec >= before.Unix()+reset && sec <= after.Unix()+reset+1
		assert.True(t, fromT0 || fromNow, "%s: %d, want %d or %d to %d", what, sec, T0.Unix()+reset, before.Unix()+reset, after.Unix()+reset+1)
	}
}
