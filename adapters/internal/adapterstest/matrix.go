package adapterstest

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/clockstore"
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
	headers.XRateLimitLimit, headers.XRateLimitRemaining, headers.XRateLimitReset,
	headers.RateLimitLimit, headers.RateLimitRemaining, headers.RateLimitReset,
	headers.RateLimit, headers.RateLimitPolicy, headers.RetryAfter,
}

// limited is the default set of fields of an allowed decision: limit,
// remaining, and the reset delay in seconds (X-RateLimit-Reset being the
// epoch second T0+reset).
func limited(limit, remaining, reset int64) map[string]string {
	l, r, s := strconv.FormatInt(limit, 10), strconv.FormatInt(remaining, 10), strconv.FormatInt(reset, 10)
	return map[string]string{
		headers.XRateLimitLimit:     l,
		headers.XRateLimitRemaining: r,
		headers.XRateLimitReset:     strconv.FormatInt(T0.Unix()+reset, 10),
		headers.RateLimitLimit:      l,
		headers.RateLimitRemaining:  r,
		headers.RateLimitReset:      s,
	}
}

// denied is limited plus Retry-After.
func denied(limit, remaining, reset, retry int64) map[string]string {
	m := limited(limit, remaining, reset)
	m[headers.RetryAfter] = strconv.FormatInt(retry, 10)
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
	return &Spec{
		Global: []Mount{NewMount(NewLimiter(t, store, p, lopts...), opts...)},
		Routes: []Route{{Method: "GET", Path: "/"}, {Method: "POST", Path: "/upload"}},
	}
}

func get(peer string) Request { return Request{Method: "GET", Path: "/", RemoteAddr: peer} }

func wantErrs(targets ...error) func(*testing.T, []error) {
	return func(t *testing.T, errs []error) {
		t.Helper()
		if len(errs) == 0 {
			t.Fatalf("error handler not called; want errors wrapping %v", targets)
		}
		for _, err := range errs {
			for _, target := range targets {
				if !errors.Is(err, target) {
					t.Errorf("error %v does not wrap %v", err, target)
				}
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
				headers.RateLimit: `"api";r=1;t=55`, headers.RateLimitPolicy: `"api";q=2;w=60`,
			}},
			{req: get(peerA), status: 200, body: Body, fields: map[string]string{
				headers.RateLimit: `"api";r=0;t=55`, headers.RateLimitPolicy: `"api";q=2;w=60`,
			}},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: map[string]string{
				headers.RateLimit: `"api";r=0;t=55`, headers.RateLimitPolicy: `"api";q=2;w=60`,
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
			cost := httplimit.WithCost(func(r keyfuncs.Request) int64 {
				if r.Method() == "POST" {
					return 3
				}
				return 1
			})
			return global(t, NewStore(t), fixed("global", 5), nil, e.option(), cost)
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
			cost := httplimit.WithCost(func(r keyfuncs.Request) int64 {
				if r.Method() == "POST" {
					return 6 // above the capacity
				}
				return 0
			})
			return global(t, NewStore(t), fixed("global", 5), nil, e.option(), cost)
		},
		steps: []step{
			{req: get(peerA), status: 500, body: internalBody, contentType: "application/json"},
			{req: Request{Method: "POST", Path: "/upload", RemoteAddr: peerA}, status: 500, body: internalBody},
		},
		errs: func(t *testing.T, errs []error) {
			if len(errs) != 2 || !errors.Is(errs[0], core.ErrInvalidCost) || !errors.Is(errs[1], core.ErrCostExceedsLimit) {
				t.Errorf("errors = %v, want ErrInvalidCost then ErrCostExceedsLimit", errs)
			}
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
			return global(t, FailingStore{}, fixed("global", 1), []core.Option{core.WithFailMode(core.FailOpen)}, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body},
			{req: get(peerA), status: 200, body: Body},
		},
		hits: 2,
		errs: wantErrs(core.ErrStore, ErrDown),
	},
	{
		name: "store down, fail closed: 503 with Retry-After",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			lopts := []core.Option{core.WithFailMode(core.FailClosed), core.WithFailClosedRetry(2 * time.Second)}
			return global(t, FailingStore{}, fixed("global", 1), lopts, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 503, body: unavailableBody("2"), contentType: "application/json",
				fields: map[string]string{headers.RetryAfter: "2"}},
		},
		errs: wantErrs(core.ErrStore, ErrDown),
	},
	{
		name: "store down, fallback store: real decisions and fields",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			lopts := []core.Option{core.WithFailMode(core.FailClosed), core.WithFallback(clockstore.At(NewStore(t), T0))}
			return global(t, FailingStore{}, fixed("global", 1), lopts, e.option())
		},
		steps: []step{
			{req: get(peerA), status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: get(peerA), status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
		},
		hits: 1,
		errs: wantErrs(core.ErrStore, ErrDown),
	},
	{
		name: "no key in request: 400",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			return global(t, NewStore(t), fixed("global", 1), nil, e.option(), httplimit.WithKeyFunc(MustKeyFunc(t)(keyfuncs.APIKeyHeader("X-Api-Key"))))
		},
		steps: []step{
			{req: get(peerA), status: 400, body: keyMissingBody, contentType: "application/json"},
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerA, Header: http.Header{"X-Api-Key": {"k1"}}}, status: 200, body: Body, fields: limited(1, 0, 55)},
			{req: Request{Method: "GET", Path: "/", RemoteAddr: peerB, Header: http.Header{"X-Api-Key": {"k1"}}}, status: 429, body: exceededBody("55"), fields: denied(1, 0, 55, 55)},
		},
		hits: 1,
		errs: func(t *testing.T, errs []error) {
			if len(errs) != 1 || !errors.Is(errs[0], keyfuncs.ErrNoKey) {
				t.Errorf("errors = %v, want one wrapping keyfuncs.ErrNoKey", errs)
			}
		},
	},
	{
		name: "strict limiter on POST /login under a global one",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			store := NewStore(t)
			return &Spec{
				Global: []Mount{NewMount(NewLimiter(t, store, fixed("global", 3)), e.option())},
				Routes: []Route{
					{Method: "GET", Path: "/"},
					{Method: "POST", Path: "/login", Limits: []Mount{NewMount(NewLimiter(t, store, fixed("login", 1)), e.option())}},
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
		name: "custom deny handler",
		build: func(t testing.TB, e *errorRecorder) *Spec {
			deny := httplimit.WithDenyHandler(func(_ keyfuncs.Request, w httplimit.Response, d core.Decision) {
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
				checkStep(t, i, s, app.Do(t, s.req))
			}
			if got := spec.Hits(); got != tc.hits {
				t.Errorf("handler ran %d times, want %d", got, tc.hits)
			}
			got := errs.all()
			if tc.errs == nil {
				if len(got) != 0 {
					t.Errorf("unexpected errors: %v", got)
				}
			} else {
				tc.errs(t, got)
			}
		})
	}
}

func checkStep(t *testing.T, i int, s step, res Response) {
	t.Helper()
	if res.Status != s.status {
		t.Errorf("step %d: status %d, want %d (body %q)", i, res.Status, s.status, res.Body)
	}
	if res.Body != s.body {
		t.Errorf("step %d: body\n  %s\nwant\n  %s", i, res.Body, s.body)
	}
	if s.contentType != "" {
		if ct := res.Header.Get("Content-Type"); ct != s.contentType {
			t.Errorf("step %d: Content-Type %q, want %q", i, ct, s.contentType)
		}
	}
	got := map[string]string{}
	for _, f := range rateFields {
		if vs := res.Header.Values(f); len(vs) > 0 {
			if len(vs) > 1 {
				t.Errorf("step %d: %s has %d values %q, want one", i, f, len(vs), vs)
			}
			got[f] = vs[0]
		}
	}
	want := s.fields
	if want == nil {
		want = map[string]string{}
	}
	if !maps.Equal(got, want) {
		for _, f := range rateFields {
			if got[f] != want[f] {
				t.Errorf("step %d: %s = %q, want %q", i, f, got[f], want[f])
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.extra)) {
		if v := res.Header.Get(k); v != s.extra[k] {
			t.Errorf("step %d: %s = %q, want %q", i, k, v, s.extra[k])
		}
	}
}
