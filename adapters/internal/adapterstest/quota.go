package adapterstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

// quotaLayer is one layer of the quota endpoint's answer.
type quotaLayer struct {
	Name       string   `json:"name"`
	Algorithm  string   `json:"algorithm"`
	Limit      int64    `json:"limit"`
	Remaining  int64    `json:"remaining"`
	Used       int64    `json:"used"`
	Reset      int64    `json:"reset"`
	ResetAfter int64    `json:"reset_after"`
	Window     float64  `json:"window"`
	RetryAfter int64    `json:"retry_after"`
	LockedOut  bool     `json:"locked_out"`
	Methods    []string `json:"methods"`
	Routes     []string `json:"routes"`
}

var quotaPrefixes atomic.Int64

// quotaT0 is the time of every decision and peek of RunQuota's stores.
var quotaT0 = time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)

// RunQuota checks httplimit.WithQuota over real sockets, on memory and on
// Redis (two app servers sharing it): GET /rate_limit, a path no route
// serves, answers the caller's layers (a client behind the trusted proxy
// of 127.0.0.0/8, by X-Forwarded-For) as JSON, with costs counted; a
// forged X-Forwarded-For entry shows the real client's quota, not the
// forged one's; 1,000 quota calls from one client and from many spend
// nothing (the client's state read with Limiter.Peek before and after is
// the same); the endpoint refuses a flood from one address with 429 and
// Retry-After; and the next request's X-RateLimit-Remaining is the quota
// less its cost.
func RunQuota(t *testing.T, h SocketHarness, srv *redistest.Server) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	layers := []httplimit.Layer{
		{Policy: fixed("all", 100), Key: client.Key},
		{Policy: core.Policy{Name: "search", Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute, Burst: 10},
			Routes: []string{"/search"}, Cost: MustCost(t, map[string]int64{"GET /search": 2}), Key: client.Key},
		{Policy: core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour},
			Methods: []string{"POST"}, Routes: []string{"/login"}, Key: client.Key},
	}
	spec := func() *Spec {
		return &Spec{Routes: []Route{{Method: "GET", Path: "/"}, {Method: "GET", Path: "/search"}, {Method: "POST", Path: "/login"}}}
	}
	one := hdr("X-Forwarded-For", "198.51.100.1")
	quota := func(t *testing.T, addr string, h http.Header) (map[string]quotaLayer, Response) {
		t.Helper()
		res := Send(t, addr, RawRequest{Path: "/rate_limit", Header: h})
		if res.Status != http.StatusOK {
			return nil, res
		}
		assert.Equal(t, "no-store", res.Header.Get("Cache-Control"))
		assert.Contains(t, res.Header.Get("Content-Type"), "application/json")
		var body struct {
			Layers []quotaLayer `json:"layers"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.Body), &body), res.Body)
		out := map[string]quotaLayer{}
		now := time.Now().Unix()
		for _, l := range body.Layers {
			// reset may tick from one call to the next: checked here, left
			// out of what the cases compare.
			assert.InDelta(t, now+l.ResetAfter, l.Reset, 2, "%s: reset is reset_after from now", l.Name)
			l.Reset = 0
			out[l.Name] = l
		}
		return out, res
	}
	peek := func(t *testing.T, f *httplimit.Flow, ip string) []core.Decision {
		t.Helper()
		key := "ip:" + ip // client.Key's
		checks := []core.Request{{Key: key}, {Key: key}, {Key: key}}
		out := make([]core.Decision, 3)
		require.NoError(t, f.Limiter().Peek(context.Background(), time.Time{}, checks, out))
		return out
	}

	for _, sc := range socketStores(t, srv, fmt.Sprintf("quota%d:", quotaPrefixes.Add(1)), false) {
		t.Run(sc.name, func(t *testing.T) {
			// The store's clock stands still (every decision and peek at
			// t0): a window ending, or a bucket refilling, during the test
			// would change the quota between two reads of it.
			store := clockstore.At(sc.new(t), quotaT0)
			f := NewFlow(t, store, layers, nil, httplimit.WithQuota("/rate_limit"), httplimit.WithClientIP(client))
			addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: spec().Routes})
			for range 3 {
				require.Equal(t, 200, Send(t, addr, RawRequest{Header: one}).Status)
			}
			for range 2 {
				require.Equal(t, 200, Send(t, addr, RawRequest{Path: "/search", Header: one}).Status)
			}

			q, res := quota(t, addr, one)
			require.NotNil(t, q, "GET /rate_limit: %d %s", res.Status, res.Body)
			require.Len(t, q, 3)
			assert.Equal(t, int64(95), q["all"].Remaining)
			assert.Equal(t, int64(5), q["all"].Used)
			assert.Equal(t, int64(6), q["search"].Remaining, "two searches at cost 2")
			assert.Equal(t, []string{"/search"}, q["search"].Routes)
			assert.Equal(t, int64(2), q["login"].Remaining)
			assert.Equal(t, []string{"POST"}, q["login"].Methods)
			assert.Equal(t, float64(60), q["all"].Window)

			forged, _ := quota(t, addr, hdr("X-Forwarded-For", "198.51.100.2, 198.51.100.1"))
			assert.Equal(t, q, forged, "a forged X-Forwarded-For entry shows the real client's quota")
			other, _ := quota(t, addr, hdr("X-Forwarded-For", "198.51.100.2"))
			assert.Equal(t, int64(100), other["all"].Remaining, "another client's own")

			before := peek(t, f, "198.51.100.1")
			answered, refused := 0, 0
			start := time.Now()
			for i := range 1000 {
				hd := one
				if i%2 == 1 {
					hd = hdr("X-Forwarded-For", "203.0.113."+strconv.Itoa(i%250)+", 198.51.100."+strconv.Itoa(10+i%200))
				}
				res := Send(t, addr, RawRequest{Path: "/rate_limit", Header: hd})
				switch res.Status {
				case http.StatusOK:
					answered++
				case http.StatusTooManyRequests:
					refused++
					assert.NotEmpty(t, res.Header.Get("Retry-After"))
				default:
					t.Fatalf("quota call %d: %d %s", i, res.Status, res.Body)
				}
			}
			// The guard lets one address through 20 at once, then 10 a
			// second: of its 500 calls, at most that many in the time taken.
			most := 20 + int(10*time.Since(start).Seconds()) + 1
			assert.GreaterOrEqual(t, answered, 500, "every other client is answered")
			assert.LessOrEqual(t, answered-500, most, "one address's flood is refused beyond the guard's rate")
			if most < 500 {
				assert.Positive(t, refused)
			}
			after := peek(t, f, "198.51.100.1")
			for i := range before {
				assert.Equal(t, before[i].Remaining, after[i].Remaining, "layer %d: 1,000 quota calls spent", i)
				assert.Equal(t, before[i].Allowed, after[i].Allowed, "layer %d", i)
			}

			if sc.name != "memory" {
				// A second app server on the same Redis, with a guard of
				// its own, shows the same quota.
				g := NewFlow(t, store, layers, nil, httplimit.WithQuota("/rate_limit"), httplimit.WithClientIP(client))
				addr2 := h.Serve(t, &Spec{Global: []Mount{{Flow: g}}, Routes: spec().Routes})
				q2, res := quota(t, addr2, one)
				require.NotNil(t, q2, "%d %s", res.Status, res.Body)
				for _, name := range []string{"all", "search", "login"} {
					assert.Equal(t, q[name].Remaining, q2[name].Remaining, "%s on the other server", name)
				}
			}

			res = Send(t, addr, RawRequest{Path: "/search", Header: one})
			require.Equal(t, 200, res.Status)
			assert.Equal(t, strconv.FormatInt(q["search"].Remaining-2, 10), res.Header.Get("X-RateLimit-Remaining"),
				"the next decision: the binding layer's quota less the request's cost")
		})
	}

	// A full Redis (maxmemory reached, noeviction) refuses the decisions'
	// writes, not the peeks' reads: the quota is still shown. A frozen one
	// is a 503 with Retry-After within the store's timeout, never a quota
	// made up.
	t.Run("redis full, then frozen", func(t *testing.T) {
		if srv.External() {
			t.Skip("REDIS_URL: the test would fill and freeze a server it does not own")
		}
		ctx := context.Background()
		rs, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("quota%d:", quotaPrefixes.Add(1))),
			redisstore.WithTimeout(300*time.Millisecond))
		require.NoError(t, err)
		store := clockstore.At(rs, quotaT0)
		f := NewFlow(t, store, layers, nil, httplimit.WithQuota("/rate_limit"), httplimit.WithClientIP(client))
		addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: spec().Routes})
		require.Equal(t, 200, Send(t, addr, RawRequest{Header: one}).Status)

		c := srv.Client()
		require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
		require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
		t.Cleanup(func() { _ = c.ConfigSet(ctx, "maxmemory", "0").Err() })
		res := Send(t, addr, RawRequest{Header: one})
		require.Equal(t, 200, res.Status, "the store refused the write: the layers fail open")
		require.Empty(t, res.Header.Get("X-RateLimit-Remaining"), "failed open, so Redis is full: no quota told")
		q, res := quota(t, addr, one)
		require.NotNil(t, q, "a full Redis: %d %s", res.Status, res.Body)
		assert.Equal(t, int64(99), q["all"].Remaining, "read from the full Redis")
		require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())

		srv.Freeze()
		defer srv.Thaw()
		start := time.Now()
		res = Send(t, addr, RawRequest{Path: "/rate_limit", Header: one})
		assert.Equal(t, http.StatusServiceUnavailable, res.Status, res.Body)
		assert.Equal(t, "1", res.Header.Get("Retry-After"))
		assert.Less(t, time.Since(start), testwait.D(5*time.Second), "bounded by the store's timeout (300 ms)")
	})
}
