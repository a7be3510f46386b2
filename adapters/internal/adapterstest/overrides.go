package adapterstest

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/overrides"
	"github.com/apigate/ratelimit/rediswatch"
)

// overrideWithin bounds the wait for an override written on one app
// server to be in force on another. The Watchers poll every 250ms, and the
// issue asks for a second; but a wall-clock bound that tight is a speed
// claim, which a busy machine breaks while nothing is wrong (the poll
// interval is rediswatch's to test). Here the bound is generous, and the
// time it took is logged.
var overrideWithin = testwait.D(10 * time.Second)

var overrideKeys atomic.Int64

// userKey keys a request by its X-User header.
func userKey(r keyfuncs.Request) (string, error) { return "user:" + r.Header("X-User"), nil }

// RunOverrides checks limits changed live, over real sockets. In process
// (overrides.Set): an override put from code is in force at the next
// request, and its removal too. Through Redis (rediswatch): two app
// servers, each with its own Limiter and its own rediswatch.Overrides, over one store
// and one overrides hash in one real redis-server; an operator's Put on
// server A lowers the layer's limit, and server B denies past the new
// limit (the time it took is logged), both then admit
// exactly the new limit to a new client; an override written by hand
// (HSET) and its removal (HDEL) are followed the same way. A layered
// app (httplimit.Layer) has one of its layers overridden.
func RunOverrides(t *testing.T, h SocketHarness, srv *redistest.Server) {
	get := func(addr, user string) Response {
		return Send(t, addr, RawRequest{Header: hdr("X-User", user)})
	}

	t.Run("in process", func(t *testing.T) {
		live := overrides.New()
		m := NewMount(t, NewStore(t), httplimit.Layer{Policy: fixed("api", 1000), Key: userKey}, []core.Option{core.WithPolicySource(live)})
		addr := h.Serve(t, &Spec{Global: []Mount{m},
			Routes: []Route{{Method: "GET", Path: "/"}}})
		for range 2 {
			require.Equal(t, http.StatusOK, get(addr, "1").Status)
		}
		require.NoError(t, live.Put("api", overrides.Override{Limit: 3}))
		res := get(addr, "1")
		require.Equal(t, http.StatusOK, res.Status, "the third of 3")
		assert.Equal(t, "3", res.Header.Get("X-RateLimit-Limit"), "the next request is decided by the override")
		require.Equal(t, http.StatusTooManyRequests, get(addr, "1").Status, "past the override")
		live.Delete("api")
		res = get(addr, "1")
		require.Equal(t, http.StatusOK, res.Status, "the override lifted at the next request")
		assert.Equal(t, "1000", res.Header.Get("X-RateLimit-Limit"))
	})

	t.Run("through Redis, two servers", func(t *testing.T) {
		n := overrideKeys.Add(1)
		hash := fmt.Sprintf("rl:overrides:adapters%d", n)
		store, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("overrides%d:", n)), redisstore.WithTimeout(limitertest.StoreTimeout))
		require.NoError(t, err)
		shared := clockstore.At(store, T0) // one window for the whole test
		ctx := context.Background()
		var servers []string
		var watchers []*rediswatch.Overrides
		for range 2 {
			w, err := rediswatch.NewOverrides(ctx, srv.Client(), rediswatch.WithKey(hash))
			require.NoError(t, err)
			t.Cleanup(func() { _ = w.Close() })
			watchers = append(watchers, w)
			f := NewFlow(t, shared, []httplimit.Layer{{Policy: fixed("api", 1000), Key: userKey}}, []core.Option{core.WithPolicySource(w)})
			servers = append(servers, h.Serve(t, &Spec{Global: []Mount{{Flow: f}},
				Routes: []Route{{Method: "GET", Path: "/"}}}))
		}
		a, b := servers[0], servers[1]
		for i := range 4 {
			require.Equal(t, http.StatusOK, get(servers[i%2], "1").Status)
		}

		// The operator lowers the limit to 5 on server A: client 1 has
		// used 4, so it gets at most one more on either server.
		start := time.Now()
		require.NoError(t, watchers[0].Put(ctx, "api", overrides.Override{Limit: 5}))
		took := deniedWithin(t, func() Response { return get(b, "1") }, "5")
		t.Logf("an override put on server A denied on server B after %v", took.Round(time.Millisecond))
		require.Equal(t, http.StatusTooManyRequests, get(a, "1").Status, "and on server A")
		// A new client: exactly 5 admitted across both servers.
		admitted := 0
		for i := range 10 {
			if get(servers[i%2], "2").Status == http.StatusOK {
				admitted++
			}
		}
		assert.Equal(t, 5, admitted, "the new limit, shared by both servers, %v after the Put", time.Since(start).Round(time.Millisecond))

		// By hand: scale the configured limit down, then lift it.
		raw := srv.Client()
		require.NoError(t, raw.HSet(ctx, hash, "api", "scale=0.003").Err()) // 1000 * 0.003 = 3
		took = deniedWithin(t, func() Response { return get(a, "3") }, "3")
		t.Logf("an HSET by hand in force on server A after %v", took.Round(time.Millisecond))
		require.NoError(t, raw.HDel(ctx, hash, "api").Err())
		took = admittedWithin(t, func() Response { return get(b, "1") }, "1000") // HDEL lifts the override on server B
		t.Logf("an HDEL by hand lifted on server B after %v", took.Round(time.Millisecond))
		took = admittedWithin(t, func() Response { return get(a, "1") }, "1000") // and on server A
		t.Logf("and on server A after %v", took.Round(time.Millisecond))
	})

	t.Run("through Redis, one layer of several", func(t *testing.T) {
		n := overrideKeys.Add(1)
		hash := fmt.Sprintf("rl:overrides:adapters%d", n)
		store, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("overrides%d:", n)), redisstore.WithTimeout(limitertest.StoreTimeout))
		require.NoError(t, err)
		ctx := context.Background()
		w, err := rediswatch.NewOverrides(ctx, srv.Client(), rediswatch.WithKey(hash))
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.Close() })
		layers := []httplimit.Layer{
			{Policy: fixed("global", 1000), Key: func(keyfuncs.Request) (string, error) { return "all", nil }},
			{Policy: fixed("user", 100), Key: userKey},
		}
		f := NewFlow(t, AtClockMulti(store, NewClock(T0)), layers, []core.Option{core.WithPolicySource(w)})
		addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}},
			Routes: []Route{{Method: "GET", Path: "/"}}})
		require.NoError(t, w.Put(ctx, "user", overrides.Override{Limit: 2}))
		for range 2 {
			require.Equal(t, http.StatusOK, get(addr, "1").Status)
		}
		res := get(addr, "1")
		require.Equal(t, http.StatusTooManyRequests, res.Status, "the user layer's override binds")
		assert.Equal(t, "2", res.Header.Get("X-RateLimit-Limit"))
		res = get(addr, "2")
		require.Equal(t, http.StatusOK, res.Status, "another user")
		assert.Equal(t, "2", res.Header.Get("X-RateLimit-Limit"), "the binding layer is the overridden one")
		require.NoError(t, w.Delete(ctx, "user"))
		require.Equal(t, http.StatusOK, get(addr, "1").Status, "lifted on this server when Delete returns")
	})

	// Limits shrunk under load below a route's cost: that route's
	// requests are denied (429, Retry-After the layer's window), not a
	// server error, and take nothing from any layer.
	t.Run("in process, shrunk below a route's cost", func(t *testing.T) {
		live := overrides.New()
		layers := []httplimit.Layer{
			{Policy: fixed("global", 6), Key: func(keyfuncs.Request) (string, error) { return "all", nil }},
			{Policy: fixed("user", 20), Key: userKey, Cost: MustCost(t, map[string]int64{"GET /search": 5})},
		}
		f, err := httplimit.New(NewStore(t), layers, httplimit.WithCore(core.WithPolicySource(live)))
		require.NoError(t, err)
		addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}},
			Routes: []Route{{Method: "GET", Path: "/"}, {Method: "GET", Path: "/search"}}})
		search := func() Response {
			return Send(t, addr, RawRequest{Path: "/search", Header: hdr("X-User", "1")})
		}
		require.Equal(t, http.StatusOK, search().Status)                     // global 1 of 6
		require.NoError(t, live.Put("user", overrides.Override{Scale: 0.1})) // user: 20 -> 2
		for range 3 {
			res := search()
			require.Equal(t, http.StatusTooManyRequests, res.Status, "a cost of 5 under a limit of 2: denied, not a 500")
			assert.Equal(t, "2", res.Header.Get("X-RateLimit-Limit"))
			assert.Equal(t, "60", res.Header.Get("Retry-After"))
		}
		live.Delete("user")
		require.Equal(t, http.StatusOK, search().Status, "lifted") // global 2 of 6
		admitted := 0
		for range 10 {
			if get(addr, "3").Status == http.StatusOK {
				admitted++
			}
		}
		assert.Equal(t, 4, admitted, "the three denials took nothing from the global layer")
	})
}

// deniedWithin sends requests, in a bounded loop, until one is denied with
// X-RateLimit-Limit limit, and returns how long that took.
func deniedWithin(t *testing.T, send func() Response, limit string) time.Duration {
	t.Helper()
	return untilWithin(t, send, func(res Response) bool {
		return res.Status == http.StatusTooManyRequests && res.Header.Get("X-RateLimit-Limit") == limit
	}, "denied at limit "+limit)
}

// admittedWithin sends requests, in a bounded loop, until one is admitted
// with X-RateLimit-Limit limit, and returns how long that took.
func admittedWithin(t *testing.T, send func() Response, limit string) time.Duration {
	t.Helper()
	return untilWithin(t, send, func(res Response) bool {
		return res.Status == http.StatusOK && res.Header.Get("X-RateLimit-Limit") == limit
	}, "admitted at limit "+limit)
}

func untilWithin(t *testing.T, send func() Response, ok func(Response) bool, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		res := send()
		if ok(res) {
			return time.Since(start)
		}
		if time.Since(start) > overrideWithin {
			t.Fatalf("not %s after %v (%d requests; last: %d, X-RateLimit-Limit %q)", what, overrideWithin, i+1,
				res.Status, res.Header.Get("X-RateLimit-Limit"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
