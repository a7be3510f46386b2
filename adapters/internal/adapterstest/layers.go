package adapterstest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// The issue's layers, scaled down so that a test exhausts them in a few
// requests: the login guard is the issue's own.
const (
	layersGlobal  = 1_000_000
	layersUser    = 20
	layersPremium = 50
	layersIP      = 300
	layersLogin   = 5
	searchCost    = 5
)

// AtClockMulti returns s deciding at c's time, as AtClock: a Take of
// several requests as of one.
func AtClockMulti(s core.Store, c *Clock) core.Store { return AtClock(s, c) }

// errPlan is what the plans' source returns for "X-Plan: broken".
var errPlan = errors.New("adapterstest: the plan service is down")

// planKey is the context key under which Authenticate puts the client's
// plan.
type planKey struct{}

// Authenticate is the suite's authentication middleware (Spec.Authenticate):
// it puts the request's X-Plan in its context, where IssuePlans reads it.
func Authenticate(ctx context.Context, header func(string) string) context.Context {
	if plan := header("X-Plan"); plan != "" {
		return context.WithValue(ctx, planKey{}, plan)
	}
	return ctx
}

// IssuePlans is the PolicySource of IssueLayers' plans: the user layer's
// policy by the plan in the request's context (see Authenticate), premium
// for "premium"; "broken" fails, "invalid" is an invalid policy.
type IssuePlans struct{}

// Adjust returns the user layer's policy by the request's plan.
func (IssuePlans) Adjust(ctx context.Context, _ string, p core.Policy) (core.Policy, error) {
	if p.Name != "user" {
		return p, nil
	}
	switch ctx.Value(planKey{}) {
	case "premium":
		p.Limit = layersPremium
	case "broken":
		return p, errPlan
	case "invalid":
		p.Limit = -1
	}
	return p, nil
}

// sourceFunc is a function that is a core.PolicySource.
type sourceFunc func(ctx context.Context, key string, p core.Policy) (core.Policy, error)

// Adjust returns f(ctx, key, p).
func (f sourceFunc) Adjust(ctx context.Context, key string, p core.Policy) (core.Policy, error) {
	return f(ctx, key, p)
}

// IssueLayers returns the issue's four layers: global (one shared key),
// user (by X-User, else by address; GET /search costs 5; premium by
// IssuePlans), login (POST /login, 5 per 15 minutes per address) and ip.
func IssueLayers(t testing.TB) []httplimit.Layer {
	t.Helper()
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	global, err := keyfuncs.Static("api")
	require.NoError(t, err)
	user := func(r keyfuncs.Request) (string, error) {
		if u := r.Header("X-User"); u != "" {
			return "user:" + u, nil
		}
		return "", keyfuncs.ErrNoKey
	}
	userOrIP, err := keyfuncs.FirstOf(user, ip)
	require.NoError(t, err)
	perMinute := func(name string, n int64) core.Policy {
		return core.Policy{Name: name, Algorithm: core.SlidingWindowCounter, Limit: n, Window: time.Minute}
	}
	return []httplimit.Layer{
		{Policy: perMinute("global", layersGlobal), Key: global},
		{Policy: perMinute("user", layersUser), Key: userOrIP,
			Cost: MustCost(t, map[string]int64{"GET /search": searchCost})},
		{Policy: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: layersLogin, Window: 15 * time.Minute},
			Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
		{Policy: perMinute("ip", layersIP), Key: ip},
	}
}

// layersHeaders is every family of fields.
var layersHeaders = headers.Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}

// layersApp is one app of the suite: its address, clock, limiter and the
// errors its flow reported.
type layersApp struct {
	addr    string
	clock   *Clock
	limiter *core.Limiter
	spec    *Spec
	errs    *errorRecorder
}

// layersRoutes are the routes of the suite's apps.
var layersRoutes = []Route{
	{Method: "GET", Path: "/items"},
	{Method: "GET", Path: "/search"},
	{Method: "POST", Path: "/login"},
	{Method: "GET", Path: "/users/:id"},
}

// RunLayers checks layered limits (httplimit.Layer) over real sockets,
// with a test clock, on a memory store and on Redis: the issue's four
// layers in one r.Use; all or nothing; the binding layer's headers and
// the draft-10 list of every layer; Retry-After when every layer admits;
// a client that follows the headers is never surprised; plans from the
// request's context, set by an authentication middleware (a PolicySource,
// IssuePlans), their failures decided by the fail mode; costs by route; and
// two app servers sharing one store; hostile spellings of POST /login,
// which never reach its handler uncounted.
func RunLayers(t *testing.T, h SocketHarness, srv *redistest.Server) {
	stores := socketStores(t, srv, "layers", false)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			serve := func(t *testing.T, fc time.Duration, routes []Route) *layersApp {
				t.Helper()
				return serveLayers(t, h, st.new(t), fc, routes)
			}
			t.Run("all or nothing", func(t *testing.T) { layersAllOrNothing(t, serve(t, 0, layersRoutes)) })
			t.Run("binding headers", func(t *testing.T) { layersBinding(t, serve(t, 0, layersRoutes)) })
			t.Run("retry after", func(t *testing.T) { layersRetryAfter(t, serve(t, 0, layersRoutes)) })
			t.Run("never surprised", func(t *testing.T) { layersNeverSurprised(t, serve(t, 0, layersRoutes)) })
			t.Run("plans", func(t *testing.T) { layersPlans(t, serve(t, 0, layersRoutes)) })
			t.Run("plan failures", func(t *testing.T) {
				layersPlanFailures(t, serve(t, 0, layersRoutes), serve(t, time.Second, layersRoutes))
			})
			t.Run("costs", func(t *testing.T) { layersCosts(t, serve(t, 0, layersRoutes)) })
			t.Run("two servers", func(t *testing.T) {
				// Two app servers, each its own Limiter, one store: the
				// layers' usage is shared, all or nothing on either.
				clock := NewClock(T0)
				store := AtClockMulti(st.new(t), clock)
				var apps []*layersApp
				for range 2 {
					layers := IssueLayers(t)
					f := NewFlow(t, store, layers, nil, httplimit.WithHeaders(layersHeaders))
					spec := &Spec{Global: []Mount{{Flow: f}}, Routes: layersRoutes}
					apps = append(apps, &layersApp{addr: h.Serve(t, spec), clock: clock, limiter: f.Limiter(), spec: spec, errs: new(errorRecorder)})
				}
				for i := range layersLogin {
					require.Equal(t, http.StatusOK, apps[i%2].send(t, "POST", "/login", "X-User", "two").Status, "login %d", i+1)
				}
				for i := range 2 {
					res := apps[i].send(t, "POST", "/login", "X-User", "two")
					require.Equal(t, http.StatusTooManyRequests, res.Status, "server %d: the login layer is shared", i)
					assert.Equal(t, layersUser-layersLogin, int(remainingOf(t, res)["user"]), "server %d: the denied login took nothing", i)
				}
				res := apps[1].send(t, "GET", "/items", "X-User", "two")
				require.Equal(t, http.StatusOK, res.Status)
				assert.Equal(t, map[string]int64{
					"global": layersGlobal - layersLogin - 1, "user": layersUser - layersLogin - 1, "ip": layersIP - layersLogin - 1,
				}, remainingOf(t, res))
			})
			t.Run("hostile login paths", func(t *testing.T) {
				layersHostile(t, serve(t, 0, []Route{{Method: "POST", Path: "/login"}}))
			})
		})
	}
}

// send sends a request with the given headers ("X-User", "u1", ...).
func (a *layersApp) send(t *testing.T, method, path string, kv ...string) Response {
	t.Helper()
	hd := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		hd.Set(kv[i], kv[i+1])
	}
	return Send(t, a.addr, RawRequest{Method: method, Path: path, Header: hd})
}

// layerItems returns the draft-10 items of res by layer name.
func layerItems(t *testing.T, res Response) map[string]core.Decision {
	t.Helper()
	items, err := headers.Parse(res.Header)
	require.NoError(t, err)
	m := map[string]core.Decision{}
	for _, it := range items {
		m[it.Policy.Name] = it
	}
	return m
}

// remainingOf returns the draft-10 r of every layer of res.
func remainingOf(t *testing.T, res Response) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for name, it := range layerItems(t, res) {
		m[name] = it.Remaining
	}
	return m
}

func layersAllOrNothing(t *testing.T, a *layersApp) {
	for i := range layersLogin {
		res := a.send(t, "POST", "/login", "X-User", "u1")
		require.Equal(t, http.StatusOK, res.Status, "login %d", i+1)
	}
	for i := range 3 {
		res := a.send(t, "POST", "/login", "X-User", "u1")
		require.Equal(t, http.StatusTooManyRequests, res.Status, "login %d over the limit", i+1)
		assert.Equal(t, map[string]int64{
			"login": 0, "global": layersGlobal - layersLogin, "user": layersUser - layersLogin, "ip": layersIP - layersLogin,
		}, remainingOf(t, res), "the denied login took nothing from the other layers")
	}
	res := a.send(t, "GET", "/items", "X-User", "u1")
	require.Equal(t, http.StatusOK, res.Status)
	assert.Equal(t, map[string]int64{
		"global": layersGlobal - layersLogin - 1, "user": layersUser - layersLogin - 1, "ip": layersIP - layersLogin - 1,
	}, remainingOf(t, res), "after 5 logins and 3 denied: GET /items has the quota of 6 requests spent, and no login layer")
	assert.Equal(t, int64(layersLogin+1), a.spec.Hits())
}

func layersBinding(t *testing.T, a *layersApp) {
	for i := range layersUser + 2 {
		res := a.send(t, "GET", "/items", "X-User", "u1")
		items := layerItems(t, res)
		require.Len(t, items, 3, "GET /items: global, user, ip; not login: %v", res.Header.Values("RateLimit"))
		least := int64(-1)
		for _, it := range items {
			if least < 0 || it.Remaining < least {
				least = it.Remaining
			}
			assert.Positive(t, it.Policy.Limit, "RateLimit-Policy lists %s", it.Policy.Name)
		}
		assert.Equal(t, strconv.FormatInt(least, 10), res.Header.Get("X-RateLimit-Remaining"), "request %d: X-RateLimit-Remaining is the least remaining", i+1)
		assert.Equal(t, strconv.FormatInt(least, 10), res.Header.Get("RateLimit-Remaining"), "request %d: draft-6 too", i+1)
		binding, err := headers.Parse(res.Header)
		require.NoError(t, err)
		require.NotEmpty(t, binding)
		assert.Equal(t, "user", binding[0].Policy.Name, "request %d: the binding layer is listed first", i+1)
		if i < layersUser {
			require.Equal(t, http.StatusOK, res.Status, "request %d", i+1)
			assert.Equal(t, strconv.Itoa(layersUser), res.Header.Get("X-RateLimit-Limit"))
			assert.Empty(t, res.Header.Get("Retry-After"))
		} else {
			require.Equal(t, http.StatusTooManyRequests, res.Status, "request %d", i+1)
			assert.NotEmpty(t, res.Header.Get("Retry-After"))
		}
	}
	res := a.send(t, "POST", "/login", "X-User", "u2")
	require.Equal(t, http.StatusOK, res.Status)
	assert.Len(t, layerItems(t, res), 4, "POST /login: every layer: %v", res.Header.Values("RateLimit"))
	assert.Equal(t, strconv.Itoa(layersLogin-1), res.Header.Get("X-RateLimit-Remaining"), "the login layer binds")
}

func layersRetryAfter(t *testing.T, a *layersApp) {
	for range layersLogin {
		require.Equal(t, http.StatusOK, a.send(t, "POST", "/login").Status)
		a.clock.Advance(time.Minute) // the logins spread over 5 minutes
	}
	res := a.send(t, "POST", "/login")
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err)
	// The first login, at T0, leaves the 15-minute log at T0+15m.
	assert.Equal(t, int((15*time.Minute-5*time.Minute)/time.Second), retry, "Retry-After: when the login layer admits again")
	assert.Equal(t, exceededBody(strconv.Itoa(retry)), res.Body)
	a.clock.Advance(time.Duration(retry)*time.Second - time.Second)
	require.Equal(t, http.StatusTooManyRequests, a.send(t, "POST", "/login").Status, "a second before Retry-After")
	a.clock.Advance(time.Second)
	res = a.send(t, "POST", "/login")
	require.Equal(t, http.StatusOK, res.Status, "at Retry-After, every layer admits")
}

// layersNeverSurprised runs a client that follows the headers: it sends
// only while the last response said it had quota, and otherwise waits, on
// the test clock, for Retry-After or the binding layer's reset. It must
// never get a 429.
func layersNeverSurprised(t *testing.T, a *layersApp) {
	var waitUntil time.Time
	paths := []string{"/items", "/users/7", "/items", "/items"}
	sent, served := 0, 0
	for step := range 400 {
		a.clock.Advance(700 * time.Millisecond)
		if a.clock.Now().Before(waitUntil) {
			continue
		}
		path := paths[step%len(paths)]
		res := a.send(t, "GET", path, "X-User", "careful")
		sent++
		require.NotEqual(t, http.StatusTooManyRequests, res.Status,
			"step %d at %s: a 429 although the last response said there was quota (%s)", step, a.clock.Now().Sub(T0), res.Header)
		require.Equal(t, http.StatusOK, res.Status)
		served++
		rem, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Remaining"), 10, 64)
		require.NoError(t, err)
		if rem == 0 {
			reset, err := strconv.ParseInt(res.Header.Get("RateLimit-Reset"), 10, 64)
			require.NoError(t, err)
			waitUntil = a.clock.Now().Add(time.Duration(reset) * time.Second)
		}
	}
	assert.Greater(t, served, layersUser, "the client used more than one window's quota")
	assert.Equal(t, sent, served)
}

func layersPlans(t *testing.T, a *layersApp) {
	for i := range layersUser {
		require.Equal(t, http.StatusOK, a.send(t, "GET", "/items", "X-User", "free").Status, "free request %d", i+1)
	}
	require.Equal(t, http.StatusTooManyRequests, a.send(t, "GET", "/items", "X-User", "free").Status, "free, over its plan")
	for i := range layersPremium {
		res := a.send(t, "GET", "/items", "X-User", "rich", "X-Plan", "premium")
		require.Equal(t, http.StatusOK, res.Status, "premium request %d", i+1)
		if i == 0 {
			assert.Equal(t, int64(layersPremium-1), remainingOf(t, res)["user"])
			assert.Equal(t, int64(layersPremium), layerItems(t, res)["user"].Policy.Limit, "RateLimit-Policy says the plan's quota")
		}
	}
	require.Equal(t, http.StatusTooManyRequests, a.send(t, "GET", "/items", "X-User", "rich", "X-Plan", "premium").Status)
	// The free user upgrades: its usage is kept, and it has room at once.
	res := a.send(t, "GET", "/items", "X-User", "free", "X-Plan", "premium")
	require.Equal(t, http.StatusOK, res.Status, "upgraded: room at once")
	assert.Equal(t, int64(layersPremium-layersUser-1), remainingOf(t, res)["user"], "its usage under the free plan is kept")
	// Downgraded again, it is over the free plan.
	require.Equal(t, http.StatusTooManyRequests, a.send(t, "GET", "/items", "X-User", "free").Status, "downgraded")
}

func layersPlanFailures(t *testing.T, open, closed *layersApp) {
	for _, plan := range []string{"broken", "invalid"} {
		res := open.send(t, "GET", "/items", "X-User", "u", "X-Plan", plan)
		assert.Equal(t, http.StatusOK, res.Status, "%s plan, FailOpen: passes", plan)
		assert.Empty(t, res.Header.Get("X-RateLimit-Remaining"), "failed open: no quota told")
		res = closed.send(t, "GET", "/items", "X-User", "u", "X-Plan", plan)
		assert.Equal(t, http.StatusServiceUnavailable, res.Status, "%s plan, FailClosed: 503: %s", plan, res.Body)
		assert.NotEmpty(t, res.Header.Get("Retry-After"))
	}
	for _, a := range []*layersApp{open, closed} {
		errs := a.errs.all()
		require.Len(t, errs, 2, "the ErrorHandler heard both")
		assert.ErrorIs(t, errs[0], errPlan)
		assert.ErrorIs(t, errs[0], limits.ErrPolicy)
		assert.ErrorIs(t, errs[1], limits.ErrPolicy)
		assert.ErrorIs(t, errs[1], core.ErrInvalidOption, "an invalid plan")
	}
	assert.Equal(t, int64(2), open.spec.Hits())
	assert.Zero(t, closed.spec.Hits())
	// A good plan on the same apps is decided as usual.
	assert.Equal(t, http.StatusOK, closed.send(t, "GET", "/items", "X-User", "u", "X-Plan", "premium").Status)
}

func layersCosts(t *testing.T, a *layersApp) {
	res := a.send(t, "GET", "/search", "X-User", "s")
	require.Equal(t, http.StatusOK, res.Status)
	assert.Equal(t, map[string]int64{"global": layersGlobal - 1, "user": layersUser - searchCost, "ip": layersIP - 1},
		remainingOf(t, res), "GET /search costs 5 in the user layer only")
	res = a.send(t, "GET", "/items", "X-User", "s")
	assert.Equal(t, int64(layersUser-searchCost-1), remainingOf(t, res)["user"], "GET /items costs 1")
	for range 2 {
		require.Equal(t, http.StatusOK, a.send(t, "GET", "/search", "X-User", "s").Status)
	}
	// 20 - 5 - 1 - 10 = 4 left: a search (5) does not fit, an item does.
	res = a.send(t, "GET", "/search", "X-User", "s")
	assert.Equal(t, http.StatusTooManyRequests, res.Status, "a search costs more than is left")
	assert.Equal(t, http.StatusOK, a.send(t, "GET", "/items", "X-User", "s").Status, "the denied search took nothing")
}

// HostileLoginPaths are spellings of POST /login that a router may or may
// not send to its handler.
var HostileLoginPaths = []string{
	"/login/", "//login", "/LOGIN", "/./login", "/a/../login", "/login%2F", "/%6Cogin",
	"/login?x", "/login;x", "/login#", "/Login/", "/%2e/login", "/login%3Fx", "//login//",
}

func layersHostile(t *testing.T, a *layersApp) {
	ctx := context.Background()
	ipKey := "ip:127.0.0.1"
	for i, path := range HostileLoginPaths {
		require.NoError(t, a.limiter.Reset(ctx, ipKey, "login"))
		user := "hostile" + strconv.Itoa(i) // the user layer has room for each
		before := a.spec.Hits()
		res := a.send(t, "POST", path, "X-User", user)
		reached := a.spec.Hits() > before
		check := a.send(t, "POST", "/login", "X-User", user)
		require.Equal(t, http.StatusOK, check.Status, "%s then /login", path)
		counted := remainingOf(t, check)["login"] == layersLogin-2
		if reached {
			assert.True(t, counted, "POST %s reached the login handler (%d) without the login layer counting it", path, res.Status)
			assert.Equal(t, int64(layersLogin-1), remainingOf(t, res)["login"], "POST %s: its own headers", path)
		}
		t.Logf("POST %-14s -> %d, handler reached %v, login layer counted %v", path, res.Status, reached, counted)
	}
}

// BenchLayers runs an adapter's two layered sub-benchmarks: Single, New(f)
// of one fixed-window policy as Bench's Limiter, then Layers, New(f) of
// the issue's four layers (global, user, login on POST /login only, ip:
// three apply to the benchmark request), quotas that never run out, over
// a memory store on the real clock. build mounts New(f) for every
// request; serve measures the app with b.Loop.
func BenchLayers[H any](b *testing.B, build func(f *httplimit.Flow) H, serve func(b *testing.B, h H)) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	single, err := httplimit.New(NewStore(b), []httplimit.Layer{{Policy: p}})
	if err != nil {
		b.Fatal(err)
	}
	clientIP, err := keyfuncs.NewClientIP()
	if err != nil {
		b.Fatal(err)
	}
	ip := clientIP.Key
	global, err := keyfuncs.Static("api")
	if err != nil {
		b.Fatal(err)
	}
	layers := []httplimit.Layer{
		{Policy: named("global", p), Key: global},
		{Policy: named("user", p), Key: ip},
		{Policy: named("login", p), Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
		{Policy: named("ip", p), Key: ip},
	}
	layered, err := httplimit.New(NewStore(b), layers)
	if err != nil {
		b.Fatal(err)
	}
	hs := build(single)
	hl := build(layered)
	b.Run("Single", func(b *testing.B) { serve(b, hs) })
	b.Run("Layers", func(b *testing.B) { serve(b, hl) })
}

// BenchLayersHTTP is BenchLayers for a framework whose app is an
// http.Handler, serving as BenchHTTP does.
func BenchLayersHTTP(b *testing.B, build func(f *httplimit.Flow) http.Handler) {
	BenchLayers(b, build, func(b *testing.B, h http.Handler) {
		req := httptest.NewRequest("GET", BenchPath, nil)
		req.RemoteAddr = BenchPeer
		w := &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	})
}
