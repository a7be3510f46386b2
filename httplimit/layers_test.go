package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// pathRequest is a request with a method, a path and a route pattern.
type pathRequest struct {
	request
	method, path, route string
}

func (r *pathRequest) Method() string { return r.method }
func (r *pathRequest) Path() string   { return r.path }
func (r *pathRequest) Route() string  { return r.route }

// routeRequest is a request with a method and a route, but no path.
type routeRequest struct {
	request
	method, route string
}

func (r *routeRequest) Method() string { return r.method }
func (r *routeRequest) Route() string  { return r.route }

func newPathRequest(method, path string) *pathRequest {
	return &pathRequest{request: *newRequest(), method: method, path: path}
}

func perMin(n int64) core.Policy {
	return core.Policy{Algorithm: core.FixedWindow, Limit: n, Window: time.Minute}
}

// testLayers returns an "all" layer keyed by IP, and a "login" layer on
// POST /login.
func testLayers(t testing.TB) []httplimit.Layer {
	ip := clientIPKey(t)
	return []httplimit.Layer{
		{Policy: named("all", perMin(100)), Key: ip},
		{Policy: named("login", perMin(5)), Methods: []string{"post"}, Routes: []string{"/login", "/users/{id}/password", "/admin/*"}, Key: ip},
	}
}

func layeredFlow(t testing.TB, layers []httplimit.Layer, lopts []core.Option, opts ...httplimit.Option) (*httplimit.Flow, *core.Limiter) {
	t.Helper()
	f, err := httplimit.New(clockstore.At(memStore(t), t0), layers, append([]httplimit.Option{httplimit.WithCore(lopts...),
		httplimit.WithHeaders(headers.Config{XRateLimit: true, Structured: true, RetryAfter: true})}, opts...)...)
	require.NoError(t, err)
	return f, f.Limiter()
}

// failingClosed returns layers, each policy failing closed for d (0:
// open).
func failingClosed(d time.Duration, layers []httplimit.Layer) []httplimit.Layer {
	for i := range layers {
		layers[i].Policy.FailClosed = d
	}
	return layers
}

// named returns p named name, the name of its layer.
func named(name string, p core.Policy) core.Policy {
	p.Name = name
	return p
}

func TestLayersConstruction(t *testing.T) {
	good := testLayers(t)
	store := memStore(t)
	with := func(mod func(ls []httplimit.Layer) []httplimit.Layer) []httplimit.Layer {
		ls := append([]httplimit.Layer(nil), good...)
		return mod(ls)
	}
	for name, layers := range map[string][]httplimit.Layer{
		"nil":        nil,
		"empty":      {},
		"too many":   make([]httplimit.Layer, limits.MaxLayers+1),
		"no name":    with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Policy.Name = ""; return ls }),
		"duplicate":  with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Policy.Name = "all"; return ls }),
		"dup case":   with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Policy.Name = "ALL"; return ls }),
		"bad name":   with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Policy.Name = "log in"; return ls }),
		"bad route":  with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Routes = []string{"login"}; return ls }),
		"mid *":      with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Routes = []string{"/a/*/b"}; return ls }),
		"dot route":  with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Routes = []string{"/a/../login"}; return ls }),
		"bad method": with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Methods = []string{"PO ST"}; return ls }),
	} {
		f, err := httplimit.New(store, layers)
		assert.Nil(t, f, name)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
	_, err := httplimit.New(store, with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Policy.Limit = -1; return ls }))
	assert.ErrorIs(t, err, core.ErrInvalidOption, "bad policy")
	_, err = httplimit.New(store, good, httplimit.WithDenyList(mustList(t, "user:x")))
	assert.ErrorIs(t, err, core.ErrInvalidOption, "lists and a layer's own Key, no WithClientIP")
	_, err = httplimit.New(store, good, httplimit.WithDenyList(mustList(t, "user:x")), httplimit.WithClientIP(mustClientIP(t)))
	assert.NoError(t, err, "lists and WithClientIP")
	// A layer without a Key is keyed by the client's address, and so may
	// go with lists without WithClientIP.
	noKey := with(func(ls []httplimit.Layer) []httplimit.Layer { ls[0].Key, ls[1].Key = nil, nil; return ls })
	f, err := httplimit.New(clockstore.At(memStore(t), t0), noKey, httplimit.WithDenyList(mustList(t, "203.0.113.0/24")))
	require.NoError(t, err)
	w := newResponse()
	require.True(t, handle(f, newPathRequest("GET", "/items"), w))
	assert.Equal(t, "99", w.header.Get("X-Ratelimit-Remaining"))
	// One layer needs no name, and takes the policy's default one.
	f, err = httplimit.New(store, []httplimit.Layer{{Policy: perMin(1)}})
	require.NoError(t, err)
	p := perMin(1)
	assert.Equal(t, limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst), f.Limiter().Policies()[0].Name)
}

// mustClientIP returns keyfuncs.NewClientIP(): the socket peer.
func mustClientIP(t testing.TB) *keyfuncs.ClientIP {
	t.Helper()
	c, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	return c
}

func mustList(t testing.TB, entries ...string) *access.List {
	t.Helper()
	var es []access.Entry
	for _, s := range entries {
		e, err := access.ParseEntry(s)
		require.NoError(t, err)
		es = append(es, e)
	}
	l, err := access.NewList(es...)
	require.NoError(t, err)
	return l
}

// loginCounted reports whether the login layer decided r.
func loginCounted(t *testing.T, f *httplimit.Flow, r keyfuncs.Request) bool {
	t.Helper()
	w := newResponse()
	require.True(t, handle(f, r, w))
	items, err := headers.Parse(w.header)
	require.NoError(t, err)
	for _, it := range items {
		if it.Policy.Name == "login" {
			return true
		}
	}
	return false
}

func TestLayerRoutes(t *testing.T) {
	layers := testLayers(t)
	layers[1].Policy.Limit = 1000
	f, _ := layeredFlow(t, layers, nil)
	for _, path := range []string{
		"/login", "/login/", "//login", "/LOGIN", "/./login", "/a/../login", "/login%2F", "/%6Cogin",
		"/%256Cogin", "/login?x", "/login;x", "/login#", "/login%3Bx", "\\login", "/a/b/../../login",
		"/../login", "/users/42/password", "/USERS/x/Password/", "/admin", "/admin/", "/admin/a/b", "/ADMIN%2Fx",
	} {
		assert.True(t, loginCounted(t, f, newPathRequest("POST", path)), "POST %s", path)
	}
	for _, path := range []string{"/", "/logins", "/log/in", "/users/42", "/users/password", "/administrator", "/api/login"} {
		assert.False(t, loginCounted(t, f, newPathRequest("POST", path)), "POST %s", path)
	}
	assert.False(t, loginCounted(t, f, newPathRequest("GET", "/login")), "GET /login")
	// A request without a path is matched by its route pattern.
	r := &routeRequest{method: "POST", route: "/users/:id/password", request: *newRequest()}
	assert.True(t, loginCounted(t, f, r), "by route pattern")
	r.route = "/users/:id"
	assert.False(t, loginCounted(t, f, r), "by route pattern")
}

func TestCostByRoute(t *testing.T) {
	cost, err := httplimit.CostByRoute(map[string]int64{"GET /search": 5, "/export/*": 100, "GET /export/small": 2, "POST /users/{id}": 3})
	require.NoError(t, err)
	for _, c := range []struct {
		method, path string
		want         int64
	}{
		{"GET", "/search", 5}, {"GET", "/Search/", 5}, {"HEAD", "/search", 5}, {"POST", "/search", 1},
		{"GET", "/export/big", 100}, {"POST", "/export", 100}, {"GET", "/export/small", 2},
		{"POST", "/users/7", 3}, {"GET", "/users/7", 1}, {"GET", "/items", 1},
	} {
		assert.Equal(t, c.want, cost(newPathRequest(c.method, c.path)), "%s %s", c.method, c.path)
	}
	for _, bad := range []map[string]int64{{"GET /search": 0}, {"GET search": 5}, {"G T /x": 1}, {"/a/*/b": 1}} {
		cost, err := httplimit.CostByRoute(bad)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "%v", bad)
		assert.Nil(t, cost, "%v", bad)
	}
}

func TestLayersAllOrNothing(t *testing.T) {
	f, _ := layeredFlow(t, testLayers(t), nil)
	for range 5 {
		require.True(t, handle(f, newPathRequest("POST", "/login"), newResponse()))
	}
	w := newResponse()
	require.False(t, handle(f, newPathRequest("POST", "/login"), w))
	assert.Equal(t, http.StatusTooManyRequests, w.status)
	assert.Equal(t, "0", w.header.Get("X-RateLimit-Remaining"), "the login layer binds")
	assert.Equal(t, `"login";r=0;t=55, "all";r=95;t=55`, w.header.Get("RateLimit"), "binding layer first; all took nothing")
	assert.Equal(t, `"login";q=5;w=60, "all";q=100;w=60`, w.header.Get("RateLimit-Policy"))
	assert.Equal(t, "55", w.header.Get("Retry-After"))
	w = newResponse()
	require.True(t, handle(f, newPathRequest("GET", "/items"), w))
	assert.Equal(t, `"all";r=94;t=55`, w.header.Get("RateLimit"), "one layer applies")
}

// badSource is a PolicySource that returns an invalid policy.
type badSource struct{}

func (badSource) Adjust(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
	p.Limit = -1
	return p, nil
}

// planKey is the context key under which the tests' authentication puts
// a client's plan.
type planKey struct{}

// withPlan returns r with plan in its context.
func withPlan[R interface{ withCtx(context.Context) }](r R, plan string) R {
	r.withCtx(context.WithValue(context.Background(), planKey{}, plan))
	return r
}

func (r *request) withCtx(ctx context.Context) { r.ctx = ctx }

// planOf is a PolicySource of the plans of the layer named layer, from the
// request's context: "broken" fails with err, "invalid" is of another
// algorithm, "panic" panics.
func planOf(layer string, err error) core.PolicySource { return layerPlans{layer, err} }

// layerPlans is planOf's source.
type layerPlans struct {
	layer string
	err   error
}

// Adjust returns p, or what the plan in ctx makes of it under the layer.
func (s layerPlans) Adjust(ctx context.Context, _ string, p core.Policy) (core.Policy, error) {
	if p.Name != s.layer {
		return p, nil
	}
	switch ctx.Value(planKey{}) {
	case "broken":
		return p, s.err
	case "invalid":
		return core.Policy{Name: p.Name, Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}, nil // not the layer's algorithm
	case "panic":
		panic("plans exploded")
	}
	return p, nil
}

// TestLayersPlanFailMode: a plan (a PolicySource reading the request's
// context) that fails, or returns an invalid policy, is decided by the
// layers' fail mode, and the ErrorHandler hears why.
func TestLayersPlanFailMode(t *testing.T) {
	errPlans := errors.New("plans down")
	for _, mode := range []time.Duration{0, time.Second} {
		var errs []error
		f, _ := layeredFlow(t, failingClosed(mode, testLayers(t)), []core.Option{core.WithPolicySource(planOf("all", errPlans))},
			httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
		for _, plan := range []string{"broken", "invalid"} {
			r := withPlan(newPathRequest("GET", "/items"), plan)
			w := newResponse()
			ok := handle(f, r, w)
			if mode == 0 {
				assert.True(t, ok, "%s plan fails open", plan)
				assert.Zero(t, w.writes)
			} else {
				assert.False(t, ok)
				assert.Equal(t, http.StatusServiceUnavailable, w.status, "%s plan fails closed", plan)
			}
		}
		require.Len(t, errs, 2)
		assert.ErrorIs(t, errs[0], errPlans)
		assert.ErrorIs(t, errs[1], limits.ErrPolicy)
		w := newResponse()
		require.True(t, handle(f, withPlan(newPathRequest("GET", "/items"), "premium"), w), "a good plan is decided as usual")
		assert.Equal(t, "99", w.header.Get("X-RateLimit-Remaining"))
	}
	// The single-policy flow: a PolicySource's invalid policy is decided by
	// the FailMode too, never a 500.
	for _, mode := range []time.Duration{0, time.Second} {
		var errs []error
		f, err := newFlow(t, memStore(t), failingClosed(mode, []httplimit.Layer{layer(perMin(5))})[0], []core.Option{core.WithPolicySource(badSource{})},
			httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
		require.NoError(t, err)
		w := newResponse()
		ok := handle(f, newRequest(), w)
		assert.Equal(t, mode == 0, ok)
		if mode > 0 {
			assert.Equal(t, http.StatusServiceUnavailable, w.status)
		}
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0], core.ErrInvalidOption)
	}
}

func TestLayersLists(t *testing.T) {
	ip := clientIPKey(t)
	user := func(r keyfuncs.Request) (string, error) { return "user:" + r.Header("X-User"), nil }
	layers := []httplimit.Layer{
		{Policy: named("ip", perMin(100)), Key: ip},
		{Policy: named("user", perMin(100)), Key: user},
	}
	cip, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	f, _ := layeredFlow(t, layers, nil, httplimit.WithClientIP(cip),
		httplimit.WithDenyList(mustList(t, "user:bad")), httplimit.WithAllowList(mustList(t, "user:vip")))
	r := newPathRequest("GET", "/")
	r.header.Set("X-User", "bad")
	w := newResponse()
	assert.False(t, handle(f, r, w), "the second layer's key is deny-listed")
	assert.Equal(t, http.StatusForbidden, w.status)
	r.header.Set("X-User", "vip")
	w = newResponse()
	assert.True(t, handle(f, r, w))
	assert.Empty(t, w.header, "allow-listed: no decision, no header")
}

func TestLayersNoneApplies(t *testing.T) {
	ip := clientIPKey(t)
	f, _ := layeredFlow(t, []httplimit.Layer{{Policy: named("login", perMin(1)), Routes: []string{"/login"}, Key: ip}}, nil)
	for range 3 {
		w := newResponse()
		assert.True(t, handle(f, newPathRequest("GET", "/items"), w))
		assert.Empty(t, w.header)
	}
}

// BenchmarkHandleLayers is BenchmarkHandle with the four layers
// (one of them on POST /login only, so three apply), allowed path.
func BenchmarkHandleLayers(b *testing.B) {
	ip := clientIPKey(b)
	global := mustKeyFunc(b)(keyfuncs.Static("api"))
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	layers := []httplimit.Layer{
		{Policy: named("global", p), Key: global},
		{Policy: named("user", p), Key: ip},
		{Policy: named("login", p), Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
		{Policy: named("ip", p), Key: ip},
	}
	// The store itself, not clockstore's, whose TakeAll copies the
	// requests to the heap.
	f, err := httplimit.New(memStore(b), layers)
	require.NoError(b, err)
	r, w := newPathRequest("GET", "/items"), newResponse()
	r.ctx = context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !handle(f, r, w) {
			b.Fatal("denied")
		}
	}
}

// TestLayersConcurrent sends logins from many goroutines at once: exactly
// the login layer's quota passes, and the denied ones took nothing from
// the other layer.
func TestLayersConcurrent(t *testing.T) {
	f, _ := layeredFlow(t, testLayers(t), nil)
	const n = 40
	var wg sync.WaitGroup
	var passed atomic.Int64
	for range n {
		wg.Go(func() {
			if handle(f, newPathRequest("POST", "/login"), newResponse()) {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(5), passed.Load())
	w := newResponse()
	require.True(t, handle(f, newPathRequest("GET", "/items"), w))
	assert.Equal(t, `"all";r=94;t=55`, w.header.Get("RateLimit"), "5 logins and this request")
}

// TestLayersPacing: a leaky-bucket layer paces the request by its Delay,
// the longest of the layers', capped by WithMaxDelay.
func TestLayersPacing(t *testing.T) {
	ip := clientIPKey(t)
	layers := []httplimit.Layer{
		{Policy: named("all", perMin(100)), Key: ip},
		// 20 per second: each queued unit delays the next by 50ms.
		{Policy: core.Policy{Name: "leaky", Algorithm: core.LeakyBucket, Limit: 20, Window: time.Second, Burst: 3}, Key: ip},
	}
	f, err := httplimit.New(memStore(t), layers) // the real clock: the delay is real
	require.NoError(t, err)
	// Timed from before the first request: the second is released no
	// sooner than 50ms after the first was admitted, however long the
	// machine took between the two (timed from between them, a stall there
	// would shorten the wait measured).
	start := time.Now()
	require.True(t, handle(f, newPathRequest("GET", "/"), newResponse()))
	require.True(t, handle(f, newPathRequest("GET", "/"), newResponse()))
	assert.GreaterOrEqual(t, time.Since(start), 45*time.Millisecond, "the second request waited its delay")
}
