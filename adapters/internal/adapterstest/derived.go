package adapterstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/rediswatch"
	"github.com/apigate/ratelimit/reputation"
)

// derivedPolicy is the hardening issue's policy: a token bucket of 3 a
// day with a burst of 800. Halved as written (1 a day, burst 400) it
// takes 400 days to fill, which no valid policy does.
var derivedPolicy = core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 3, Window: 24 * time.Hour, Burst: 800}

// derivedBand is the burst the halved rate (1 a day) refills within 366
// days: the capacity of the band's policy, once clamped.
const derivedBand = "366"

// RunDerivedLimits checks, over real sockets, on memory and on Redis with
// two app servers (one limiter store, shared scores and bans), that a
// reputation band's scaled policy never switches limiting off for the
// client it punishes: with the bands of docs/reputation.md (halved above
// 20, banned above 40) on the bucket, a client uses its burst of
// 800, is denied until it enters the band, then sends 1,000 requests:
// none is admitted (its bucket, full, refills nothing on the store's
// frozen clock), each is a 429 telling the clamped policy in its
// rate-limit headers or a 403 of the ban, and the ErrorHandler hears
// nothing (no decision falls to the fail mode, which admits).
func RunDerivedLimits(t *testing.T, h SocketHarness, srv *redistest.Server) {
	run := rand.IntN(1 << 20)
	bands := []reputation.Band{{Name: "suspicious", Above: 20, Scale: 0.5}, {Name: "abusive", Above: 40, Ban: true}}
	for _, be := range []struct {
		name    string
		servers int
	}{{"memory", 1}, {"redis two app servers", 2}} {
		t.Run(be.name, func(t *testing.T) {
			var errs errorRecorder
			var store core.Store
			if be.servers == 1 {
				store = NewStore(t)
			} else {
				s, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("derived-%d-%d:", run, rand.Int64())), redisstore.WithTimeout(limitertest.StoreTimeout))
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				store = s
			}
			addrs := derivedServers(t, h, srv, store, be.servers, bands, &errs, run)
			conns := make([]*Conn, len(addrs))
			for i, a := range addrs {
				conns[i] = Dial(t, a)
			}
			ip := fmt.Sprintf("198.19.%d.%d", run%250, 7)
			send := func(i int) Response { return conns[i%len(conns)].Do(t, RawRequest{Path: "/", Header: fromIP(ip)}) }

			for i := range 800 {
				res := send(i)
				require.Equal(t, http.StatusOK, res.Status, "request %d of the burst", i+1)
			}
			// Denied until a denial takes it above 20, into the band.
			denied := 0
			for i := 0; ; i++ {
				res := send(i)
				require.Less(t, denied, 30, "the client never entered the band: %d %v", res.Status, res.Header)
				if res.Status != http.StatusTooManyRequests || res.Header.Get("X-RateLimit-Limit") != "800" {
					require.Greater(t, denied, 19, "denied %d times before the band", denied)
					break
				}
				denied++
			}
			seen, bare := map[int]int{}, 0
			var first string // the first response neither limited nor banned
			for i := range 1000 {
				res := send(i)
				seen[res.Status]++
				switch res.Status {
				case http.StatusForbidden: // banned above 40
				case http.StatusTooManyRequests:
					assert.Equal(t, derivedBand, res.Header.Get("X-RateLimit-Limit"), "request %d: the band's policy, clamped", i+1)
					assert.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"), "request %d", i+1)
					assert.NotEmpty(t, res.Header.Get("Retry-After"), "request %d", i+1)
				default:
					if res.Header.Get("X-RateLimit-Limit") == "" {
						bare++
					}
					if first == "" {
						first = fmt.Sprintf("request %d: %d, headers %v", i+1, res.Status, res.Header)
					}
				}
			}
			t.Logf("after its burst and %d denials, of 1,000 requests: %v", denied, seen)
			assert.Zero(t, seen[http.StatusOK], "admitted: the scaled policy allows none (first: %s)", first)
			assert.Zero(t, bare, "answered without rate-limit headers")
			assert.Positive(t, seen[http.StatusTooManyRequests], "denied by the band's policy")
			if all := errs.all(); !assert.Empty(t, len(all), "errors the ErrorHandler heard: no decision may fail (an invalid policy falls to the fail mode)") {
				t.Logf("the first: %v", all[0])
			}
		})
	}
}

// derivedServers serves RunDerivedLimits's flow, over store, on servers
// app servers: with a Tracker of bands each, sharing scores and bans
// through the Redis of srv when there are several.
func derivedServers(t *testing.T, h SocketHarness, srv *redistest.Server, store core.Store, servers int, bands []reputation.Band, errs *errorRecorder, run int) []string {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	bansKey := fmt.Sprintf("derived-bans-%d-%d", run, rand.Int64())
	var addrs []string
	for range servers {
		cfg := reputation.Config{Bands: bands}
		if servers > 1 {
			o := srv.Options()
			o.ContextTimeoutEnabled = true
			rc := redis.NewClient(o)
			t.Cleanup(func() { _ = rc.Close() })
			bans, err := rediswatch.NewBans(context.Background(), rc, rediswatch.WithKey(bansKey))
			require.NoError(t, err)
			t.Cleanup(func() { _ = bans.Close() })
			shared, err := rediswatch.NewScores(rc)
			require.NoError(t, err)
			cfg.Scores, cfg.Bans = shared, bans
		}
		rep, err := reputation.New(cfg)
		require.NoError(t, err)
		f := NewFlow(t, clockstore.At(store, T0), []httplimit.Layer{{Policy: derivedPolicy}}, nil,
			httplimit.WithClientIP(client), httplimit.WithReputation(rep), errs.option())
		addrs = append(addrs, h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: []Route{{Method: "GET", Path: "/"}}}))
	}
	return addrs
}
