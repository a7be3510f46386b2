package adapterstest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

var settlePrefixes atomic.Int64

// settleT0 is the time every decision of RunSettle's stores is made at:
// no window passes and no bucket drains during a case, so what is stored
// is exactly what was settled.
var settleT0 = time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)

// settleBackends returns the app servers' stores of each backend RunSettle
// runs on: one memory store (one process), and two Redis stores with
// clients of their own sharing one prefix (two app servers), each
// deciding at settleT0.
func settleBackends(t *testing.T, srv *redistest.Server) []settleBackend {
	prefix := fmt.Sprintf("settle%d:", settlePrefixes.Add(1))
	var rs []core.Store
	var sent []func() int64
	for range 2 {
		c := redis.NewClient(srv.Options())
		t.Cleanup(func() { _ = c.Close() })
		sent = append(sent, redistest.CountScripts(c))
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(limitertest.StoreTimeout))
		require.NoError(t, err)
		rs = append(rs, clockstore.At(s, settleT0))
	}
	return []settleBackend{
		{name: "memory", stores: []core.Store{clockstore.At(NewStore(t), settleT0)}},
		{name: "redis two app servers", stores: rs, scripts: func() int64 { return sent[0]() + sent[1]() }},
	}
}

// settleBackend is a store per app server, and for Redis the scripts
// their clients have sent (redistest.CountScripts: no other client's).
type settleBackend struct {
	name    string
	stores  []core.Store
	scripts func() int64
}

// RunSettle checks layers that count by the response (httplimit.Counts)
// over real sockets, on memory and on Redis with two app servers:
//   - a failure-only login limit of 5: 1,000 requests in order, mixing
//     995 successes and 5 failures, all pass, and then every request is
//     refused; 200 at once, half failing, across the app servers, get at
//     most 5 failures to the handler, and what is stored is those
//     failures alone; a handler's Report wins over the status both ways;
//   - a failure-only lockout: five failures lock out, successes between
//     them count for nothing, and no Reset is called;
//   - a success-only limit: its companion refuses failures at will;
//   - costs settled after the response, of 1 to 100, reported by the
//     handler or by a response header, 200 at once across the app
//     servers, on every algorithm: what is stored is their sum, to the
//     unit.
func RunSettle(t *testing.T, h SocketHarness, srv *redistest.Server) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	from := func(ip string, extra ...string) http.Header {
		hd := http.Header{"X-Forwarded-For": {ip}}
		for i := 0; i+1 < len(extra); i += 2 {
			hd.Set(extra[i], extra[i+1])
		}
		return hd
	}
	fail := func(ip string) http.Header { return from(ip, StatusHeader, "401") }
	login := httplimit.Layer{
		Policy: core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour},
		Key:    client.Key, Methods: []string{"POST"}, Routes: []string{"/login"}, Counts: httplimit.CountFailures,
	}
	routes := []Route{{Method: "POST", Path: "/login"}, {Method: "GET", Path: "/"}}
	serve := func(t *testing.T, stores []core.Store, layers []httplimit.Layer, copts ...core.Option) ([]string, []*httplimit.Flow, *Spec) {
		t.Helper()
		spec := &Spec{Routes: routes}
		var addrs []string
		var flows []*httplimit.Flow
		for _, s := range stores {
			f := NewFlow(t, s, layers, copts, httplimit.WithClientIP(client))
			spec.Global = []Mount{{Flow: f}} // read as the app is built: one Spec counts for both
			addrs = append(addrs, h.Serve(t, spec))
			flows = append(flows, f)
		}
		return addrs, flows, spec
	}
	used := func(t *testing.T, f *httplimit.Flow, layer int, key string) int64 {
		t.Helper()
		reqs := make([]core.Request, layer+1)
		reqs[layer].Key = "ip:" + key // client.Key's
		out := make([]core.Decision, layer+1)
		require.NoError(t, f.Limiter().Peek(context.Background(), time.Time{}, reqs, out))
		return out[layer].Limit - out[layer].Remaining
	}

	for _, be := range settleBackends(t, srv) {
		t.Run(be.name, func(t *testing.T) {
			t.Run("failures-only-in-order", func(t *testing.T) {
				addrs, flows, spec := serve(t, be.stores, []httplimit.Layer{login})
				ip := "198.51.100.10"
				for i := range 1000 {
					hd := from(ip)
					if i%200 == 199 {
						hd = fail(ip)
					}
					res := Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: hd})
					require.NotEqual(t, http.StatusTooManyRequests, res.Status, "request %d: successes count for nothing, and only 5 failed", i)
				}
				ok, failed := spec.Outcomes()
				assert.Equal(t, int64(995), ok)
				assert.Equal(t, int64(5), failed)
				assert.Equal(t, int64(5), used(t, flows[0], 0, ip), "the five failures alone are counted")
				for i := range 20 {
					hd := from(ip)
					if i%2 == 0 {
						hd = fail(ip)
					}
					res := Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: hd})
					assert.Equal(t, http.StatusTooManyRequests, res.Status, "after five failures, request %d", i)
				}
				_, failed = spec.Outcomes()
				assert.Equal(t, int64(5), failed, "no sixth failure reached the handler")
				res := Send(t, addrs[0], RawRequest{Path: "/", Header: from(ip)})
				assert.Equal(t, http.StatusOK, res.Status, "another route is not limited")
			})

			t.Run("failures-only-at-once", func(t *testing.T) {
				addrs, flows, spec := serve(t, be.stores, []httplimit.Layer{login})
				ip := "198.51.100.11"
				var wg sync.WaitGroup
				var refused atomic.Int64
				for i := range 200 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						hd := from(ip)
						if i%2 == 0 {
							hd = fail(ip)
						}
						res := Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: hd})
						if res.Status == http.StatusTooManyRequests {
							refused.Add(1)
						}
					}()
				}
				wg.Wait()
				ok, failed := spec.Outcomes()
				assert.LessOrEqual(t, failed, int64(5), "at most 5 failures reach the handler")
				assert.Equal(t, int64(200), ok+failed+refused.Load())
				assert.Equal(t, failed, used(t, flows[0], 0, ip), "what is stored is the failures alone (ok %d)", ok)
			})

			t.Run("report-wins", func(t *testing.T) {
				addrs, flows, _ := serve(t, be.stores, []httplimit.Layer{login})
				ip := "198.51.100.12"
				for range 2 { // 200, reported failed: counted
					require.Equal(t, 200, Send(t, addrs[0], RawRequest{Method: "POST", Path: "/login", Header: from(ip, ReportHeader, "fail")}).Status)
				}
				for range 3 { // 401, reported succeeded: not counted
					require.Equal(t, 401, Send(t, addrs[len(addrs)-1], RawRequest{Method: "POST", Path: "/login", Header: from(ip, StatusHeader, "401", ReportHeader, "ok")}).Status)
				}
				assert.Equal(t, int64(2), used(t, flows[0], 0, ip))
			})

			t.Run("failure-only-lockout", func(t *testing.T) {
				lo := login
				// A window shorter than the lockout: it is the lockout that refuses.
				lo.Policy.Window = 30 * time.Second
				lo.Policy.Lockout, lo.Policy.LockoutMax, lo.Policy.LockoutMemory = time.Minute, time.Hour, time.Hour
				addrs, _, spec := serve(t, be.stores, []httplimit.Layer{lo})
				ip := "198.51.100.13"
				for i := range 5 {
					for range 3 { // good logins between the failures: never counted
						require.Equal(t, 200, Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: from(ip)}).Status)
					}
					require.Equal(t, 401, Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: fail(ip)}).Status)
				}
				for i := range 4 {
					res := Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: from(ip)})
					require.Equal(t, http.StatusTooManyRequests, res.Status, "after five failures, a good password too is refused")
					assert.Equal(t, "60", res.Header.Get("Retry-After"), "locked out for the minute")
				}
				ok, failed := spec.Outcomes()
				assert.Equal(t, int64(15), ok)
				assert.Equal(t, int64(5), failed)
			})

			t.Run("successes-only-companion", func(t *testing.T) {
				api := httplimit.Layer{Policy: core.Policy{Name: "api", Algorithm: core.SlidingWindowCounter, Limit: 4, Window: time.Hour},
					Key: client.Key, Counts: httplimit.CountSuccesses}
				addrs, flows, spec := serve(t, be.stores, []httplimit.Layer{api})
				ip := "198.51.100.14"
				for i := range 4 {
					require.Equal(t, 401, Send(t, addrs[i%len(addrs)], RawRequest{Path: "/", Header: fail(ip)}).Status)
				}
				res := Send(t, addrs[0], RawRequest{Path: "/", Header: fail(ip)})
				require.Equal(t, http.StatusTooManyRequests, res.Status, "failing at will is refused after Limit failures")
				_, failed := spec.Outcomes()
				assert.Equal(t, int64(4), failed)
				assert.Equal(t, int64(0), used(t, flows[0], 0, ip), "failures never count as successes")
				assert.Equal(t, int64(4), used(t, flows[0], 1, ip))
			})

			if h.CancelsOnDisconnect() {
				t.Run("client-left-during-the-handler", func(t *testing.T) {
					// The client sends a good login and leaves; the handler
					// sees its context end, and answers 200: the login is
					// given back, after the client has left.
					addrs, flows, spec := serve(t, be.stores, []httplimit.Layer{login})
					ip := "198.51.100.18"
					c := Dial(t, addrs[0])
					require.NoError(t, c.Write(RawRequest{Method: "POST", Path: "/login", Header: from(ip, WaitHeader, "1")}))
					deadline := testwait.Deadline(10 * time.Second)
					for spec.Hits() == 0 { // the handler runs: now leave
						require.True(t, time.Now().Before(deadline), "the handler never ran")
						time.Sleep(time.Millisecond)
					}
					require.NoError(t, c.CloseWrite())
					for {
						ok, _ := spec.Outcomes()
						if ok == 1 && used(t, flows[0], 0, ip) == 0 {
							break
						}
						require.True(t, time.Now().Before(deadline), "the handler ran (%d) and its login was given back (%d counted)", ok, used(t, flows[0], 0, ip))
						time.Sleep(5 * time.Millisecond)
					}
				})
			}

			if be.name != "memory" {
				t.Run("round-trips", func(t *testing.T) {
					all := httplimit.Layer{Policy: fixed("all", 10000), Key: client.Key}
					addrs, _, _ := serve(t, be.stores, []httplimit.Layer{all, login})
					ip := "198.51.100.16"
					for _, c := range []struct {
						name   string
						req    RawRequest
						trips  int64
						status int
					}{
						{"a request no settling layer applies to", RawRequest{Path: "/", Header: from(ip)}, 1, 200},
						{"a failure, which stays counted", RawRequest{Method: "POST", Path: "/login", Header: fail(ip)}, 1, 401},
						{"a success, given back", RawRequest{Method: "POST", Path: "/login", Header: from(ip)}, 2, 200},
					} {
						warm := c.req // each server's first call of a script may load it
						warm.Header = c.req.Header.Clone()
						warm.Header.Set("X-Forwarded-For", "198.51.100.17")
						for _, addr := range addrs {
							require.Equal(t, c.status, Send(t, addr, warm).Status, c.name)
						}
						before := be.scripts()
						for i := range 4 {
							require.Equal(t, c.status, Send(t, addrs[i%len(addrs)], c.req).Status, c.name)
						}
						// The settling happens before the response is sent, so
						// the count is complete when the fourth has arrived.
						assert.Equal(t, 4*c.trips, be.scripts()-before, "%s: %d round trip(s) each", c.name, c.trips)
					}
				})
			}

			for _, alg := range limits.Algorithms[core.Algorithm]() {
				t.Run("reported-cost/"+string(alg), func(t *testing.T) {
					p := core.Policy{Name: "tokens", Algorithm: alg, Limit: 30000, Window: time.Hour}
					if limits.IsBucket(alg) {
						p.Burst = 30000
					}
					reserve := func(keyfuncs.Request) int64 { return 100 }
					tokens := httplimit.Layer{Policy: p, Key: client.Key, Counts: httplimit.CountReported, Cost: reserve}
					addrs, flows, _ := serve(t, be.stores, []httplimit.Layer{tokens})
					ip := "198.51.100.15"
					var wg sync.WaitGroup
					var sum atomic.Int64
					for i := range 200 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							cost := int64(1 + i%100)
							res := Send(t, addrs[i%len(addrs)], RawRequest{Path: "/", Header: from(ip, ReportCostHeader, strconv.FormatInt(cost, 10))})
							if assert.Equal(t, 200, res.Status) {
								sum.Add(cost)
							}
						}()
					}
					wg.Wait()
					assert.Equal(t, sum.Load(), used(t, flows[0], 0, ip), "stored usage is the sum of the reported costs")
				})
			}
		})
	}

	// Redis frozen between a request's admission and its settling: the
	// refund times out within the store's timeout (300 ms), the
	// ErrorHandler hears it, and the response is answered all the same.
	// The refund was sent, and Redis runs it once thawed: the success is
	// given back once, late, and never twice.
	t.Run("redis frozen before the refund", func(t *testing.T) {
		if srv.External() {
			t.Skip("REDIS_URL: the test would freeze a server it does not own")
		}
		rs, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("settle%d:", settlePrefixes.Add(1))),
			redisstore.WithTimeout(300*time.Millisecond))
		require.NoError(t, err)
		var heard atomic.Int64
		f := NewFlow(t, clockstore.At(rs, settleT0), []httplimit.Layer{login}, nil, httplimit.WithClientIP(client),
			httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) {
				if strings.Contains(err.Error(), "settling the response") {
					heard.Add(1)
				}
			}))
		spec := &Spec{Routes: routes, Global: []Mount{{Flow: f}}, During: srv.Freeze}
		addr := h.Serve(t, spec)
		ip := "198.51.100.19"
		require.Equal(t, http.StatusUnauthorized, Send(t, addr, RawRequest{Method: "POST", Path: "/login", Header: fail(ip)}).Status) // 1 counted
		start := time.Now()
		res := Send(t, addr, RawRequest{Method: "POST", Path: "/login", Header: from(ip, DuringHeader, "1")}) // a success
		took := time.Since(start)
		srv.Thaw()
		assert.Equal(t, http.StatusOK, res.Status, "answered all the same")
		assert.Less(t, took, testwait.D(5*time.Second), "bounded by the store's timeout (300 ms)")
		t.Logf("a settling response with Redis frozen before its refund: %v", took)
		assert.Equal(t, int64(1), heard.Load(), "the ErrorHandler heard the failed refund")
		deadline := testwait.Deadline(5 * time.Second)
		for used(t, f, 0, ip) != 1 {
			require.True(t, time.Now().Before(deadline), "the refund Redis ran once thawed: %d counted", used(t, f, 0, ip))
			time.Sleep(10 * time.Millisecond)
		}
		require.Equal(t, http.StatusOK, Send(t, addr, RawRequest{Method: "POST", Path: "/login", Header: from(ip)}).Status)
		assert.Equal(t, int64(1), used(t, f, 0, ip), "given back once, not twice: the failure still counts")
	})
}
