package adapterstest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// OddLoginPaths are spellings of POST /login that HostileLoginPaths does
// not try: NUL, control and space bytes, a trailing dot, encoded dots and
// slashes (once and twice), Unicode look-alikes and letters that Unicode
// case folding maps to ASCII, path parameters, an absolute-form target, a
// long query, more segments than the matcher keeps inline, and paths of
// 64 KiB and more.
var OddLoginPaths = []string{
	"/login%00", "/login%09", "/login%20", "/login.", "/login%2e", "/login/.", "/login/x/..",
	"/login%2f", "/LOGIN%2F", "/%252Flogin", "/x%252F..%252Flogin", "/%2e%2e/login", "/.%2e/login",
	"/log%C4%B0n", "/LOG%C4%B0N", "/log\xc4\xb0n", "/%EF%BD%8Cogin", "/login%E2%80%8B",
	"/login;jsessionid=1", "/login;a/", "http://127.0.0.1/login", "http://127.0.0.1//LOGIN/",
	"/login?" + strings.Repeat("q", 60<<10),
	strings.Repeat("/a", 40) + strings.Repeat("/..", 40) + "/login",
	"/" + strings.Repeat("/", 64<<10) + "login",
	strings.Repeat("/a", 16<<10) + strings.Repeat("/..", 16<<10) + "/login",
	"/" + strings.Repeat("./", 32<<10) + "login",
}

// RunLayersAttacks attacks layered limits (httplimit.Layer) over real
// sockets as a hostile client would, on a memory store and on Redis (srv):
//
//   - odd login paths: no spelling of POST /login in OddLoginPaths reaches
//     the login handler without the login layer counting it;
//   - odd costs: a layer's cost of 0, below 0, above its capacity or
//     math.MaxInt64 is a 500 that takes nothing from any layer and tells
//     no quota; a cost of the whole capacity (limits.MaxLimit) is admitted,
//     and the next request denied with a Retry-After;
//   - disconnects: clients that close their side of the connection, before
//     the decision, while a policy source runs, or in the middle of
//     their body, whatever the store and the fail mode: the handler runs
//     at most as often as the tightest layer admits, never for a client
//     that left before the decision, and every other answer is 429 or 499;
//     and, where the framework tells handlers that a client left, one that
//     leaves while a leaky-bucket layer paces its request gets 499 and
//     never reaches the handler.
func RunLayersAttacks(t *testing.T, h SocketHarness, srv *redistest.Server) {
	t.Run("odd login paths", func(t *testing.T) {
		a := serveLayers(t, h, NewStore(t), 0, []Route{{Method: "POST", Path: "/login"}})
		layersOddPaths(t, a, OddLoginPaths)
	})

	stores := socketStores(t, srv, "attacks", true)
	for _, st := range stores[:2] {
		t.Run("odd costs/"+st.name, func(t *testing.T) { layersOddCosts(t, h, st.new(t)) })
	}
	for _, st := range stores {
		for _, m := range failModes {
			t.Run("disconnects/"+st.name+"/"+m.name, func(t *testing.T) {
				layersDisconnects(t, h, st.new(t), m.failClosed, m.opts(t))
			})
		}
	}
	if h.CancelsOnDisconnect() {
		t.Run("disconnects/while paced", func(t *testing.T) { layersPacedDisconnects(t, h) })
	}
}

// serveLayers serves the issue's layers (IssueLayers) over store, on a
// test clock, with routes.
func serveLayers(t *testing.T, h SocketHarness, store core.Store, fc time.Duration, routes []Route) *layersApp {
	t.Helper()
	a := &layersApp{clock: NewClock(T0), errs: new(errorRecorder)}
	layers := failClosed(IssueLayers(t), fc)
	f := NewFlow(t, AtClockMulti(store, a.clock), layers, []core.Option{core.WithPolicySource(IssuePlans{})},
		httplimit.WithHeaders(layersHeaders), a.errs.option())
	a.limiter = f.Limiter()
	a.spec = &Spec{
		Authenticate: Authenticate,
		Global:       []Mount{{Flow: f}},
		Routes:       routes,
	}
	a.addr = h.Serve(t, a.spec)
	return a
}

// layersOddPaths is layersHostile for paths that a server may refuse
// outright (431 for a long one), named clipped in the log.
func layersOddPaths(t *testing.T, a *layersApp, paths []string) {
	ctx := context.Background()
	ipKey := "ip:127.0.0.1"
	reachedAny := false
	for i, path := range paths {
		name := strconv.Quote(path)
		if len(name) > 32 {
			name = fmt.Sprintf("%s... (%d bytes)", name[:32], len(path))
		}
		require.NoError(t, a.limiter.Reset(ctx, ipKey, "login"))
		user := "odd" + strconv.Itoa(i) // the user layer has room for each
		before := a.spec.Hits()
		res, err := Dial(t, a.addr).Try(RawRequest{Method: "POST", Path: path, Header: http.Header{"X-User": {user}}})
		if err != nil {
			// A server may close the connection on a request it refuses
			// to parse: nothing reached the handler.
			assert.Equal(t, before, a.spec.Hits(), "POST %s: no response (%v), yet the handler ran", name, err)
			t.Logf("POST %-48s -> %v", name, err)
			continue
		}
		reached := a.spec.Hits() > before
		check := a.send(t, "POST", "/login", "X-User", user)
		require.Equal(t, http.StatusOK, check.Status, "%s then /login", name)
		counted := remainingOf(t, check)["login"] == layersLogin-2
		if reached {
			reachedAny = true
			assert.True(t, counted, "POST %s reached the login handler (%d) without the login layer counting it", name, res.Status)
			assert.Equal(t, int64(layersLogin-1), remainingOf(t, res)["login"], "POST %s: its own headers", name)
		}
		t.Logf("POST %-48s -> %d, handler reached %v, login layer counted %v", name, res.Status, reached, counted)
	}
	// Every framework routes some odd spellings (a query, a trailing
	// slash) to the handler: were none to reach it, this checked nothing.
	assert.True(t, reachedAny, "no odd path reached the login handler")
}

// costHeader carries the cost of a request in the odd costs app.
const costHeader = "X-Cost"

// layersOddCosts sends requests whose cost in one layer is odd through
// three layers: global (every request, cost 1), items (GET /items, 10 a
// minute, the request's cost) and bulk (GET /bulk, a token bucket of
// limits.MaxLimit, the request's cost).
func layersOddCosts(t *testing.T, h SocketHarness, store core.Store) {
	clock := NewClock(T0)
	global, err := keyfuncs.Static("api")
	require.NoError(t, err)
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	cost := func(r keyfuncs.Request) int64 {
		n, err := strconv.ParseInt(r.Header(costHeader), 10, 64)
		if err != nil {
			return 0
		}
		return n
	}
	const globalLimit, itemsLimit = 1_000_000, 10
	layers := []httplimit.Layer{
		{Key: global, Policy: core.Policy{Name: "global", Algorithm: core.SlidingWindowCounter, Limit: globalLimit, Window: time.Minute}},
		{Key: ip, Routes: []string{"/items"}, Cost: cost,
			Policy: core.Policy{Name: "items", Algorithm: core.FixedWindow, Limit: itemsLimit, Window: time.Minute}},
		{Key: ip, Routes: []string{"/bulk"}, Cost: cost,
			Policy: core.Policy{Name: "bulk", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Hour}},
	}
	var errs errorRecorder
	spec := &Spec{
		Global: []Mount{{Flow: NewFlow(t, AtClockMulti(store, clock), layers, nil, httplimit.WithHeaders(layersHeaders), errs.option())}},
		Routes: []Route{{Method: "GET", Path: "/items"}, {Method: "GET", Path: "/bulk"}, {Method: "GET", Path: "/other"}},
	}
	addr := h.Serve(t, spec)
	send := func(path, cost string) Response {
		t.Helper()
		return Send(t, addr, RawRequest{Path: path, Header: http.Header{costHeader: {cost}}})
	}

	bad := []struct {
		path, cost string
		err        error
	}{
		{"/items", "0", core.ErrInvalidOption},
		{"/items", "-1", core.ErrInvalidOption},
		{"/items", "x", core.ErrInvalidOption},
		{"/items", strconv.FormatInt(math.MinInt64, 10), core.ErrInvalidOption},
		{"/items", strconv.Itoa(itemsLimit + 1), core.ErrInvalidOption},
		{"/items", strconv.FormatInt(math.MaxInt64, 10), core.ErrInvalidOption},
		{"/bulk", strconv.FormatInt(limits.MaxLimit+1, 10), core.ErrInvalidOption},
		{"/bulk", strconv.FormatInt(math.MaxInt64, 10), core.ErrInvalidOption},
	}
	for _, b := range bad {
		res := send(b.path, b.cost)
		assert.Equal(t, http.StatusInternalServerError, res.Status, "%s cost %s", b.path, b.cost)
		assert.Equal(t, internalBody, res.Body, "%s cost %s", b.path, b.cost)
		for _, f := range []string{"Retry-After", "X-Ratelimit-Remaining", "Ratelimit-Remaining", "Ratelimit"} {
			assert.Empty(t, res.Header.Get(f), "%s cost %s: %s tells a quota that nobody decided", b.path, b.cost, f)
		}
	}
	got := errs.all()
	require.Len(t, got, len(bad), "the ErrorHandler heard each")
	for i, b := range bad {
		assert.ErrorIs(t, got[i], b.err, "%s cost %s", b.path, b.cost)
	}
	require.Zero(t, spec.Hits(), "a request of a bad cost reached its handler")

	// The whole capacity in one request, on both layers.
	res := send("/bulk", strconv.FormatInt(limits.MaxLimit, 10))
	require.Equal(t, http.StatusOK, res.Status, res.Body)
	assert.Equal(t, map[string]int64{"global": globalLimit - 1, "bulk": 0}, remainingOf(t, res), "the bad costs took nothing")
	res = send("/bulk", "1")
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	assert.Equal(t, "1", res.Header.Get("Retry-After"), "a token comes back within the second")
	res = send("/items", strconv.Itoa(itemsLimit))
	require.Equal(t, http.StatusOK, res.Status)
	assert.Equal(t, map[string]int64{"global": globalLimit - 2, "items": 0}, remainingOf(t, res))
	res = send("/items", "1")
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	windowEnd := strconv.Itoa(int(T0.Truncate(time.Minute).Add(time.Minute).Sub(T0) / time.Second))
	assert.Equal(t, windowEnd, res.Header.Get("Retry-After"), "when the items window ends")
	assert.Equal(t, exceededBody(windowEnd), res.Body)
	res = send("/other", "1")
	require.Equal(t, http.StatusOK, res.Status)
	assert.Equal(t, map[string]int64{"global": globalLimit - 3}, remainingOf(t, res), "the denied requests took nothing from global")
	assert.Equal(t, int64(3), spec.Hits())
}

// holdPlanHeader asks the policy source of the layered disconnect attack
// to wait, under the login layer, until the request's context ends.
const holdPlanHeader = "X-Test-Hold-Plan"

// holdPlanKey is the context key under which the attack's authentication
// middleware marks a request whose plan is to be held.
type holdPlanKey struct{}

// layersDisconnects is runDisconnects against a login layer of
// disconnectLimit per hour under a global layer, over store: half-closed
// requests, some of whose clients leave while the login layer's key
// function or the policy source runs (a plan service that is slow to
// answer).

func layersDisconnects(t *testing.T, h SocketHarness, store core.Store, fc time.Duration, lopts []core.Option) {
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	global, err := keyfuncs.Static("api")
	require.NoError(t, err)
	hold := func(ctx context.Context) {
		select {
		case <-ctx.Done():
		case <-time.After(ioGuard):
		}
	}
	holdKey := func(r keyfuncs.Request) {
		if r.Header(holdHeader) != "" {
			hold(r.Context())
		}
	}
	plans := sourceFunc(func(ctx context.Context, _ string, p core.Policy) (core.Policy, error) {
		if p.Name == "login" && ctx.Value(holdPlanKey{}) != nil {
			hold(ctx)
		}
		return p, nil
	})
	layers := []httplimit.Layer{
		{Key: global, Policy: core.Policy{Name: "global", Algorithm: core.SlidingWindowCounter, Limit: 1000, Window: time.Hour}},
		{Policy: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: disconnectLimit, Window: time.Hour},
			Key: func(r keyfuncs.Request) (string, error) { holdKey(r); return ip(r) }},
	}
	var errs errorRecorder
	f := NewFlow(t, store, failClosed(layers, fc), append(slices.Clip(lopts), core.WithPolicySource(plans)), errs.option())
	l := f.Limiter()
	spec := &Spec{
		Authenticate: func(ctx context.Context, header func(string) string) context.Context {
			if header(holdPlanHeader) != "" {
				return context.WithValue(ctx, holdPlanKey{}, true)
			}
			return ctx
		},
		Global: []Mount{{Flow: f}},
		Routes: []Route{{Method: "GET", Path: "/"}, {Method: "POST", Path: "/upload"}},
	}
	addr := h.Serve(t, spec)

	type kind struct {
		name  string
		req   RawRequest
		early bool // the client is gone before the decision
	}
	kinds := []kind{
		{"after request", RawRequest{HalfClose: true}, false},
		{"mid body", disconnectKind(leaveBeforeBody).request(), false},
	}
	if h.CancelsOnDisconnect() {
		// First: the first requests find the quota whole.
		kinds = append([]kind{
			{"before key", RawRequest{Header: http.Header{holdHeader: {"1"}}, HalfClose: true}, true},
			{"in the policy source", RawRequest{Header: http.Header{holdPlanHeader: {"1"}}, HalfClose: true}, true},
		}, kinds...)
	}
	var ok int64
	statuses := map[int]int{}
	for i := range disconnectRequests {
		k := kinds[i%len(kinds)]
		res, err := Dial(t, addr).Try(k.req)
		if k.name == "mid body" && err != nil {
			statuses[0]++ // a server that reads the body first may drop the connection
			continue
		}
		require.NoError(t, err, "request %d (%s)", i, k.name)
		statuses[res.Status]++
		switch res.Status {
		case http.StatusOK:
			ok++
			assert.False(t, k.early, "request %d: the client left %s, yet got 200", i, k.name)
		case http.StatusTooManyRequests, statusClientClosed:
		case http.StatusBadRequest:
			assert.Equal(t, "mid body", k.name, "request %d: 400", i) // the server's own answer to a short body
		default:
			t.Errorf("request %d (%s): status %d, body %q", i, k.name, res.Status, res.Body)
		}
	}
	t.Logf("statuses %v, handler ran %d times", statuses, spec.Hits())
	assert.LessOrEqual(t, spec.Hits(), int64(disconnectLimit), "handler runs over the login layer's limit of %d", disconnectLimit)
	assert.Equal(t, spec.Hits(), ok, "200s and handler runs differ")
	var canceled int
	for _, err := range errs.all() {
		assert.NotErrorIs(t, err, limits.ErrStore, "a disconnect reported as a store failure")
		assert.NotErrorIs(t, err, core.ErrInvalidOption, "a disconnect in the policy source reported as a bad policy")
		if errors.Is(err, context.Canceled) {
			canceled++
		}
	}
	if h.CancelsOnDisconnect() {
		assert.Positive(t, canceled, "no disconnect was reported as context.Canceled")
	}
	// The login layer applies to every request: the global layer counted
	// only the requests it admitted, not those it denied nor those whose
	// client left before the decision.
	v, _, err := l.AllowLayers(context.Background(), time.Time{}, []core.Request{{Key: "api", Cost: 1}}, nil)
	require.NoError(t, err)
	assert.LessOrEqual(t, v.Limit-v.Remaining, int64(disconnectLimit+1), "the global layer counted requests that the login layer denied or that were never decided")
}

// multiDecided is a memory store that signals each layered decision it
// made (decidedStore's Take signals one of one request or of several).
type multiDecided struct {
	decidedStore
}

// layersPacedDisconnects is runPacedDisconnects with a leaky-bucket layer
// under a global one: a client that leaves while its admitted request is
// paced gets 499, and the handler never runs for it.
func layersPacedDisconnects(t *testing.T, h SocketHarness) {
	store := multiDecided{decidedStore{Store: NewStore(t), decided: make(chan struct{}, 8)}}
	global, err := keyfuncs.Static("api")
	require.NoError(t, err)
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	layers := []httplimit.Layer{
		{Key: global, Policy: core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour}},
		{Key: ip, Policy: core.Policy{Name: "paced", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 4}},
	}
	checkPacedDisconnects(t, h, store, layers, store.decided)
}
