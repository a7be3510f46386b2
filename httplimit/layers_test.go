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
	"github.com/apigate/ratelimit/internal/clockstore"
	"github.com/apigate/ratelimit/internal/limits"
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
	ip := mustKeyFunc(t)(keyfuncs.IP())
	return []httplimit.Layer{
		{Name: "all", Policy: perMin(100), Key: ip},
		{Name: "login", Policy: perMin(5), Methods: []string{"post"}, Routes: []string{"/login", "/users/{id}/password", "/admin/*"}, Key: ip},
	}
}

func layeredFlow(t testing.TB, layers []httplimit.Layer, lopts []core.Option, opts ...httplimit.Option) (*httplimit.Flow, *core.Limiter) {
	t.Helper()
	l, err := httplimit.NewLayered(clockstore.At(memStore(t), t0), layers, lopts...)
	require.NoError(t, err)
	f, err := httplimit.New(l, append([]httplimit.Option{httplimit.WithLayers(layers...),
		httplimit.WithHeaders(headers.Config{XRateLimit: true, Structured: true, RetryAfter: true})}, opts...)...)
	require.NoError(t, err)
	return f, l
}

func TestLayersConstruction(t *testing.T) {
	ip := mustKeyFunc(t)(keyfuncs.IP())
	good := testLayers(t)
	store := memStore(t)
	single := newLimiter(t, store, perMin(1))
	layered, err := httplimit.NewLayered(store, good)
	require.NoError(t, err)
	with := func(mod func(ls []httplimit.Layer) []httplimit.Layer) []httplimit.Layer {
		ls := append([]httplimit.Layer(nil), good...)
		return mod(ls)
	}
	for name, layers := range map[string][]httplimit.Layer{
		"empty":      {},
		"no key":     with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Key = nil; return ls }),
		"no name":    with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Name = ""; return ls }),
		"duplicate":  with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Name = "all"; return ls }),
		"dup case":   with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Name = "ALL"; return ls }),
		"bad route":  with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Routes = []string{"login"}; return ls }),
		"mid *":      with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Routes = []string{"/a/*/b"}; return ls }),
		"dot route":  with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Routes = []string{"/a/../login"}; return ls }),
		"bad method": with(func(ls []httplimit.Layer) []httplimit.Layer { ls[1].Methods = []string{"PO ST"}; return ls }),
	} {
		_, err := httplimit.NewLayered(store, layers)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "NewLayered: %s", name)
		_, err = httplimit.New(layered, httplimit.WithLayers(layers...))
		assert.ErrorIs(t, err, core.ErrInvalidOption, "WithLayers: %s", name)
	}
	for name, opts := range map[string][]httplimit.Option{
		"single limiter":   {httplimit.WithLayers(good...)},
		"other layers":     {httplimit.WithLayers(good[0], httplimit.Layer{Name: "other", Policy: perMin(5), Key: ip})},
		"one layer of two": {httplimit.WithLayers(good[0])},
		"other policy":     {httplimit.WithLayers(good[0], httplimit.Layer{Name: "login", Policy: perMin(6), Key: ip})},
		"other FailClosed": {httplimit.WithLayers(good[0], httplimit.Layer{Name: "login", Policy: perMin(5), Key: ip, FailClosed: true})},
		"with key func":    {httplimit.WithLayers(good...), httplimit.WithKeyFunc(ip)},
		"with cost":        {httplimit.WithLayers(good...), httplimit.WithCost(func(keyfuncs.Request) int64 { return 1 })},
		"lists, no IP":     {httplimit.WithLayers(good...), httplimit.WithDenyList(mustList(t, "user:x"))},
	} {
		l := layered
		if name == "single limiter" {
			l = single
		}
		_, err := httplimit.New(l, opts...)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
	// The layers in another order are the same layers.
	_, err = httplimit.New(layered, httplimit.WithLayers(good[1], good[0]))
	assert.NoError(t, err)
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
	require.True(t, f.Handle(r, w))
	items, err := headers.ParseLayers(w.header)
	require.NoError(t, err)
	for _, it := range items {
		if it.Name == "login" {
			return true
		}
	}
	return false
}

func TestLayerRoutes(t *testing.T) {
	layers := testLayers(t)
	layers[1].Policy = perMin(1000)
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
	cost := httplimit.CostByRoute(map[string]int64{"GET /search": 5, "/export/*": 100, "GET /export/small": 2, "POST /users/{id}": 3})
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
	assert.NoError(t, httplimit.CheckCostByRoute(map[string]int64{"GET /search": 5}))
	for _, bad := range []map[string]int64{{"GET /search": 0}, {"GET search": 5}, {"G T /x": 1}, {"/a/*/b": 1}} {
		assert.ErrorIs(t, httplimit.CheckCostByRoute(bad), core.ErrInvalidOption, "%v", bad)
		assert.Zero(t, httplimit.CostByRoute(bad)(newPathRequest("GET", "/search")), "%v: cost 0, which the flow refuses", bad)
	}
}

func TestLayersAllOrNothing(t *testing.T) {
	f, _ := layeredFlow(t, testLayers(t), nil)
	for range 5 {
		require.True(t, f.Handle(newPathRequest("POST", "/login"), newResponse()))
	}
	w := newResponse()
	require.False(t, f.Handle(newPathRequest("POST", "/login"), w))
	assert.Equal(t, http.StatusTooManyRequests, w.status)
	assert.Equal(t, "0", w.header.Get(headers.XRateLimitRemaining), "the login layer binds")
	assert.Equal(t, `"login";r=0;t=55, "all";r=95;t=55`, w.header.Get(headers.RateLimit), "binding layer first; all took nothing")
	assert.Equal(t, `"login";q=5;w=60, "all";q=100;w=60`, w.header.Get(headers.RateLimitPolicy))
	assert.Equal(t, "55", w.header.Get(headers.RetryAfter))
	w = newResponse()
	require.True(t, f.Handle(newPathRequest("GET", "/items"), w))
	assert.Equal(t, `"all";r=94;t=55`, w.header.Get(headers.RateLimit), "one layer applies")
}

// badSource is a PolicySource that returns an invalid policy.
type badSource struct{}

func (badSource) Adjust(p core.Policy) core.Policy { p.Limit = -1; return p }

func TestLayersPolicyForFailMode(t *testing.T) {
	errPlans := errors.New("plans down")
	for _, mode := range []core.FailMode{core.FailOpen, core.FailClosed} {
		layers := testLayers(t)
		layers[0].PolicyFor = func(r keyfuncs.Request, _ string) (*core.Policy, error) {
			switch r.Header("X-Plan") {
			case "broken":
				return nil, errPlans
			case "invalid":
				return &core.Policy{Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}, nil // not the layer's algorithm
			}
			return nil, nil
		}
		var errs []error
		f, _ := layeredFlow(t, layers, []core.Option{core.WithFailMode(mode)},
			httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
		for _, plan := range []string{"broken", "invalid"} {
			r := newPathRequest("GET", "/items")
			r.header.Set("X-Plan", plan)
			w := newResponse()
			ok := f.Handle(r, w)
			if mode == core.FailOpen {
				assert.True(t, ok, "%s plan fails open", plan)
				assert.Zero(t, w.writes)
			} else {
				assert.False(t, ok)
				assert.Equal(t, http.StatusServiceUnavailable, w.status, "%s plan fails closed", plan)
			}
		}
		require.Len(t, errs, 2)
		assert.ErrorIs(t, errs[0], errPlans)
		assert.ErrorIs(t, errs[1], core.ErrInvalidPolicy)
	}
	// The single-policy flow: a PolicySource's invalid policy is decided by
	// the FailMode too, never a 500.
	for _, mode := range []core.FailMode{core.FailOpen, core.FailClosed} {
		l := newLimiter(t, memStore(t), perMin(5), core.WithPolicySource(badSource{}), core.WithFailMode(mode))
		var errs []error
		f, err := httplimit.New(l, httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
		require.NoError(t, err)
		w := newResponse()
		ok := f.Handle(newRequest(), w)
		assert.Equal(t, mode == core.FailOpen, ok)
		if mode == core.FailClosed {
			assert.Equal(t, http.StatusServiceUnavailable, w.status)
		}
		require.Len(t, errs, 1)
		assert.ErrorIs(t, errs[0], core.ErrInvalidPolicy)
	}
}

func TestLayersLists(t *testing.T) {
	ip := mustKeyFunc(t)(keyfuncs.IP())
	user := func(r keyfuncs.Request) (string, error) { return "user:" + r.Header("X-User"), nil }
	layers := []httplimit.Layer{
		{Name: "ip", Policy: perMin(100), Key: ip},
		{Name: "user", Policy: perMin(100), Key: user},
	}
	cip, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	f, _ := layeredFlow(t, layers, nil, httplimit.WithClientIP(cip),
		httplimit.WithDenyList(mustList(t, "user:bad")), httplimit.WithAllowList(mustList(t, "user:vip")))
	r := newPathRequest("GET", "/")
	r.header.Set("X-User", "bad")
	w := newResponse()
	assert.False(t, f.Handle(r, w), "the second layer's key is deny-listed")
	assert.Equal(t, http.StatusForbidden, w.status)
	r.header.Set("X-User", "vip")
	w = newResponse()
	assert.True(t, f.Handle(r, w))
	assert.Empty(t, w.header, "allow-listed: no decision, no header")
}

func TestLayersNoneApplies(t *testing.T) {
	ip := mustKeyFunc(t)(keyfuncs.IP())
	f, _ := layeredFlow(t, []httplimit.Layer{{Name: "login", Policy: perMin(1), Routes: []string{"/login"}, Key: ip}}, nil)
	for range 3 {
		w := newResponse()
		assert.True(t, f.Handle(newPathRequest("GET", "/items"), w))
		assert.Empty(t, w.header)
	}
}

// BenchmarkHandleLayers is BenchmarkHandle with the four layers
// (one of them on POST /login only, so three apply), allowed path.
func BenchmarkHandleLayers(b *testing.B) {
	ip := mustKeyFunc(b)(keyfuncs.IP())
	global := mustKeyFunc(b)(keyfuncs.Static("api"))
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	layers := []httplimit.Layer{
		{Name: "global", Policy: p, Key: global},
		{Name: "user", Policy: p, Key: ip},
		{Name: "login", Policy: p, Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
		{Name: "ip", Policy: p, Key: ip},
	}
	// The store itself, not clockstore's, whose TakeAll copies the
	// requests to the heap.
	l, err := httplimit.NewLayered(memStore(b), layers)
	require.NoError(b, err)
	f, err := httplimit.New(l, httplimit.WithLayers(layers...))
	require.NoError(b, err)
	r, w := newPathRequest("GET", "/items"), newResponse()
	r.ctx = context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !f.Handle(r, w) {
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
			if f.Handle(newPathRequest("POST", "/login"), newResponse()) {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(5), passed.Load())
	w := newResponse()
	require.True(t, f.Handle(newPathRequest("GET", "/items"), w))
	assert.Equal(t, `"all";r=94;t=55`, w.header.Get(headers.RateLimit), "5 logins and this request")
}

// TestLayersPacing: a leaky-bucket layer paces the request by its Delay,
// the longest of the layers', capped by WithMaxDelay.
func TestLayersPacing(t *testing.T) {
	ip := mustKeyFunc(t)(keyfuncs.IP())
	layers := []httplimit.Layer{
		{Name: "all", Policy: perMin(100), Key: ip},
		// 20 per second: each queued unit delays the next by 50ms.
		{Name: "leaky", Policy: core.Policy{Algorithm: core.LeakyBucket, Limit: 20, Window: time.Second, Burst: 3}, Key: ip},
	}
	l, err := httplimit.NewLayered(memStore(t), layers) // the real clock: the delay is real
	require.NoError(t, err)
	f, err := httplimit.New(l, httplimit.WithLayers(layers...))
	require.NoError(t, err)
	// Timed from before the first request: the second is released no
	// sooner than 50ms after the first was admitted, however long the
	// machine took between the two (timed from between them, a stall there
	// would shorten the wait measured).
	start := time.Now()
	require.True(t, f.Handle(newPathRequest("GET", "/"), newResponse()))
	require.True(t, f.Handle(newPathRequest("GET", "/"), newResponse()))
	assert.GreaterOrEqual(t, time.Since(start), 45*time.Millisecond, "the second request waited its delay")
}
