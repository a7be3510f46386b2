package adapterstest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/rediswatch"
	"github.com/apigate/ratelimit/reputation"
)

// repBands are RunReputation's bands: limits halved above 20, banned
// above 40 (a signal weighs 1, so the 41st bad request bans).
var repBands = []reputation.Band{{Name: "suspicious", Above: 20, Scale: 0.5}, {Name: "abusive", Above: 40, Ban: true}}

// repClock is a virtual clock for a Tracker: it moves only when told.
type repClock struct{ us atomic.Int64 }

func (c *repClock) now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *repClock) advance(d time.Duration) { c.us.Add(d.Microseconds()) }
func newRepClock() *repClock                { c := &repClock{}; c.us.Store(T0.UnixMicro()); return c }
func repIP(run, i int) string               { return fmt.Sprintf("198.18.%d.%d", run%250, i) }
func repIPv6(run, i int, host uint16) string {
	return fmt.Sprintf("2001:db8:%x:%x00::%x", run%0xffff, i, host)
}
func fromIP(ip string, kv ...string) http.Header {
	h := http.Header{"X-Forwarded-For": {ip}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// RunReputation checks httplimit.WithReputation over real sockets, on
// memory and on Redis with two app servers (their Trackers sharing the
// scores, and their bans through rediswatch):
//   - a scanner walking 1,000 missing paths is banned within 100 requests,
//     answered 403 with Retry-After and the abnormal-usage-detected
//     problem type, and the other server holds the ban within a second;
//     a client walking missing files on a route that exists is not;
//   - a credential stuffer trying usernames from one address is banned,
//     and a password it guesses right clears nothing;
//   - forged X-Forwarded-For entries ban the real client, not the forged
//     one, and addresses rotated inside an IPv6 /56 are one client;
//   - a normal client (2% 404s on a route that exists, 1% 401s) is never
//     penalised over 100,000 requests, one a second on a virtual clock;
//   - a client in the band that halves limits gets them whole again once
//     its score has decayed, on the virtual clock;
//   - in shadow mode, nothing is done.
func RunReputation(t *testing.T, h SocketHarness, srv *redistest.Server) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	run := rand.IntN(1 << 20)
	routes := []Route{{Method: "GET", Path: "/"}, {Method: "GET", Path: "/files/:name"}, {Method: "POST", Path: "/login"}}
	layers := []httplimit.Layer{{Policy: fixed("all", 1_000_000_000)}}
	type backend struct {
		name  string
		redis bool
	}
	serve := func(t *testing.T, be backend, cfg reputation.Config, clock *repClock, servers int) ([]string, []*reputation.Tracker) {
		t.Helper()
		var addrs []string
		var reps []*reputation.Tracker
		bansKey := fmt.Sprintf("rep-bans-%d-%d", run, rand.Int64())
		for range servers {
			c := cfg
			if be.redis {
				o := srv.Options()
				o.ContextTimeoutEnabled = true // as docs/redis.md asks: the Tracker's timeouts hold
				rc := redis.NewClient(o)
				t.Cleanup(func() { _ = rc.Close() })
				bans, err := rediswatch.NewBans(context.Background(), rc, rediswatch.WithKey(bansKey))
				require.NoError(t, err)
				t.Cleanup(func() { _ = bans.Close() })
				shared, err := rediswatch.NewScores(rc)
				require.NoError(t, err)
				c.Scores, c.Bans = shared, bans
			}
			if clock != nil {
				c.Now = clock.now
			}
			rep, err := reputation.New(c)
			require.NoError(t, err)
			f := NewFlow(t, clockstore.At(NewStore(t), T0), layers, nil, httplimit.WithClientIP(client),
				httplimit.WithReputation(rep), httplimit.WithProblemDetails())
			addrs = append(addrs, h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: routes}))
			reps = append(reps, rep)
		}
		return addrs, reps
	}
	// walk sends n requests on one connection and counts their statuses,
	// stopping at the first with status stop (0: never).
	walk := func(t *testing.T, addr string, n int, req func(i int) RawRequest, stop int) (map[int]int, Response) {
		t.Helper()
		c := Dial(t, addr)
		seen := map[int]int{}
		var last Response
		for i := range n {
			last = c.Do(t, req(i))
			seen[last.Status]++
			if last.Status == stop {
				break
			}
		}
		return seen, last
	}

	for _, be := range []backend{{"memory", false}, {"redis two app servers", true}} {
		t.Run(be.name, func(t *testing.T) {
			t.Run("scanner", func(t *testing.T) {
				servers := 1
				if be.redis {
					servers = 2
				}
				addrs, reps := serve(t, be, reputation.Config{Bands: repBands}, nil, servers)
				ip := repIP(run, 1)
				seen, res := walk(t, addrs[0], 1000, func(i int) RawRequest {
					return RawRequest{Path: "/wp-admin/" + strconv.Itoa(i) + ".php", Header: fromIP(ip)}
				}, http.StatusForbidden)
				banned := time.Now()
				require.Equal(t, http.StatusForbidden, res.Status, "banned: %v", seen)
				assert.Equal(t, 41, seen[http.StatusNotFound], "the 41st missing path takes it past 40: the last to pass")
				retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
				require.NoError(t, err, "Retry-After")
				assert.InDelta(t, 60, retry, 7, "a first offence: a minute, ±10%")
				pd := Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(ip, "Accept", "application/problem+json")})
				assert.Equal(t, http.StatusForbidden, pd.Status)
				var body struct{ Type string }
				require.NoError(t, json.Unmarshal([]byte(pd.Body), &body), pd.Body)
				assert.Equal(t, "https://iana.org/assignments/http-problem-types#abnormal-usage-detected", body.Type)
				assert.Equal(t, http.StatusForbidden, Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(ip)}).Status, "still banned")
				assert.Equal(t, http.StatusOK, Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(repIP(run, 2))}).Status, "another client")
				// A banned client's flood costs nothing: refused by the bans
				// every server holds in process, and not scored again (on
				// Redis, no script a request). What is asserted is that no
				// signal is scored, not how many scripts Redis ran meanwhile:
				// the bans' polls and other tests run scripts too, more the
				// slower the machine.
				signals := func() (n int) {
					for _, rep := range reps {
						for _, c := range rep.Stats().Signals {
							n += int(c)
						}
					}
					return n
				}
				before := signals()
				seen, _ = walk(t, addrs[0], 200, func(i int) RawRequest {
					return RawRequest{Path: "/wp-login/" + strconv.Itoa(i), Header: fromIP(ip)}
				}, 0)
				assert.Equal(t, map[int]int{http.StatusForbidden: 200}, seen)
				assert.Equal(t, before, signals(), "signals scored for 200 banned requests")
				if be.redis {
					// And the score Redis holds carries no signal later than
					// the ban.
					key := "ip:" + ip // the client's key, as the Tracker scores it
					require.Positive(t, reps[0].Score(key), "the scanner's signals were heard")
					_, last := redistest.ScoreState(t, srv.Client(), "ratelimit:rep:s:"+key)
					assert.True(t, last.Before(banned), "the score's last signal, %v after the ban, is older than it", last.Sub(banned))

					// The other server holds the ban within a second of it
					// (rediswatch polls every 200 ms).
					end := banned.Add(testwait.D(time.Second))
					for Send(t, addrs[1], RawRequest{Path: "/", Header: fromIP(ip)}).Status != http.StatusForbidden {
						require.True(t, time.Now().Before(end), "the other server holds the ban within %v", testwait.D(time.Second))
						time.Sleep(10 * time.Millisecond)
					}
				}
			})

			if be.redis {
				// A scanner spread over two app servers, one request to each
				// in turn: each signal's script returns the score both
				// servers' signals made, so the request that crosses the
				// band, on either server, is the last to pass there (a
				// score each server kept alone would let 80 pass).
				t.Run("scanner-across-servers", func(t *testing.T) {
					addrs, _ := serve(t, be, reputation.Config{Bands: repBands}, nil, 2)
					ip := repIP(run, 11)
					conns := []*Conn{Dial(t, addrs[0]), Dial(t, addrs[1])}
					seen := map[int]int{}
					for i := range 1000 {
						res := conns[i%2].Do(t, RawRequest{Path: "/wp-admin/" + strconv.Itoa(i) + ".php", Header: fromIP(ip)})
						seen[res.Status]++
						if res.Status == http.StatusForbidden {
							break
						}
					}
					// The 41st crosses the band on its server, which bans at once;
					// the 42nd may reach the other server before it polls the
					// ban (within 200 ms), and pass there, its last.
					assert.Equal(t, 1, seen[http.StatusForbidden])
					assert.Contains(t, []int{41, 42}, seen[http.StatusNotFound], "passed, of the scanner's requests spread over both servers")
				})

				// Redis frozen (a partition, a stuck command) while a scanner
				// walks: no bad request waits on Redis but the one that finds
				// it frozen (250 ms) and the ban's write (1 s); the scores count
				// on this server meanwhile, and the ban, which the shared bans
				// cannot take, holds here.
				t.Run("redis-frozen", func(t *testing.T) {
					if srv.External() {
						t.Skip("REDIS_URL: the test would freeze a server it does not own")
					}
					addrs, _ := serve(t, be, reputation.Config{Bands: repBands}, nil, 1)
					ip := repIP(run, 12)
					c := Dial(t, addrs[0])
					require.Equal(t, http.StatusNotFound, c.Do(t, RawRequest{Path: "/warm", Header: fromIP(ip)}).Status)
					srv.Freeze()
					thawed := false
					thaw := func() {
						if !thawed {
							thawed = true
							srv.Thaw()
						}
					}
					defer thaw()
					start := time.Now()
					seen := map[int]int{}
					// A request that waited on Redis took 250 ms at least; one
					// that did not, a few ms on a quiet machine, and a busy one
					// is given the scale (testwait) before it is called slow.
					slowAfter := testwait.D(200 * time.Millisecond)
					slow := 0
					for i := range 100 {
						begin := time.Now()
						res := c.Do(t, RawRequest{Path: "/wp-admin/" + strconv.Itoa(i), Header: fromIP(ip)})
						if time.Since(begin) > slowAfter {
							slow++
						}
						seen[res.Status]++
						if res.Status == http.StatusForbidden {
							break
						}
					}
					took := time.Since(start)
					assert.Equal(t, map[int]int{http.StatusNotFound: 40, http.StatusForbidden: 1}, seen, "banned at its 41st signal (one before the freeze)")
					assert.LessOrEqual(t, slow, 3, "requests that waited on the frozen Redis")
					assert.Less(t, took, testwait.D(10*time.Second))
					t.Logf("a scanner's walk with Redis frozen: %v, %d requests slow", took, slow)
					assert.Equal(t, http.StatusForbidden, c.Do(t, RawRequest{Path: "/", Header: fromIP(ip)}).Status, "the ban holds on this server")
					thaw()
				})
			}

			t.Run("missing-files-on-a-route", func(t *testing.T) {
				addrs, _ := serve(t, be, reputation.Config{Bands: repBands}, nil, 1)
				seen, _ := walk(t, addrs[0], 1000, func(i int) RawRequest {
					return RawRequest{Path: "/files/f" + strconv.Itoa(i), Header: fromIP(repIP(run, 3), StatusHeader, "404")}
				}, http.StatusForbidden)
				assert.Equal(t, map[int]int{http.StatusNotFound: 1000}, seen, "a 404 on a route that exists is no scanner's")
			})

			t.Run("credential-stuffer", func(t *testing.T) {
				addrs, _ := serve(t, be, reputation.Config{Bands: repBands}, nil, 1)
				ip := repIP(run, 4)
				seen, res := walk(t, addrs[0], 200, func(i int) RawRequest {
					h := fromIP(ip, StatusHeader, "401", "X-Username", "user"+strconv.Itoa(i))
					if i == 20 {
						h.Del(StatusHeader) // one password right: it clears nothing
					}
					return RawRequest{Method: "POST", Path: "/login", Header: h}
				}, http.StatusForbidden)
				require.Equal(t, http.StatusForbidden, res.Status, "%v", seen)
				assert.Equal(t, 41, seen[http.StatusUnauthorized], "banned at the 41st failure, the success between them cleared nothing")
				assert.Equal(t, 1, seen[http.StatusOK])
			})

			t.Run("forged-and-rotated", func(t *testing.T) {
				addrs, _ := serve(t, be, reputation.Config{Bands: repBands}, nil, 1)
				victim, scanner := repIP(run, 5), repIP(run, 6)
				seen, _ := walk(t, addrs[0], 100, func(i int) RawRequest {
					return RawRequest{Path: "/x" + strconv.Itoa(i), Header: fromIP(victim + ", " + scanner)} // forged leftmost entry
				}, http.StatusForbidden)
				assert.Equal(t, 41, seen[http.StatusNotFound])
				assert.Equal(t, http.StatusOK, Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(victim)}).Status, "the forged address is not banned")
				assert.Equal(t, http.StatusForbidden, Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(scanner)}).Status)

				seen, _ = walk(t, addrs[0], 100, func(i int) RawRequest {
					return RawRequest{Path: "/y" + strconv.Itoa(i), Header: fromIP(repIPv6(run, 7, uint16(i+1)))} // a new address each time
				}, http.StatusForbidden)
				assert.Equal(t, 41, seen[http.StatusNotFound], "one /56: one client")
				assert.Equal(t, http.StatusForbidden, Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(repIPv6(run, 7, 999))}).Status)
			})

			if be.redis {
				return // the virtual clock is the memory store's
			}
			t.Run("normal-client", func(t *testing.T) {
				clock := newRepClock()
				addrs, reps := serve(t, be, reputation.Config{Bands: repBands}, clock, 1)
				worst := 0.0
				ip := repIP(run, 8)
				c := Dial(t, addrs[0])
				full := ""
				for i := range 100_000 {
					clock.advance(time.Second)
					req := RawRequest{Path: "/", Header: fromIP(ip)}
					switch {
					case i%50 == 7:
						req = RawRequest{Path: "/files/gone", Header: fromIP(ip, StatusHeader, "404")}
					case i%100 == 13:
						req = RawRequest{Method: "POST", Path: "/login", Header: fromIP(ip, StatusHeader, "401")}
					}
					res := c.Do(t, req)
					require.NotEqual(t, http.StatusForbidden, res.Status, "request %d: a normal client banned", i)
					if full == "" {
						full = res.Header.Get("X-RateLimit-Limit")
					}
					require.Equal(t, full, res.Header.Get("X-RateLimit-Limit"), "request %d: its limits scaled", i)
					worst = max(worst, reps[0].Score("ip:"+ip))
				}
				assert.Less(t, worst, repBands[0].Above, "its highest score")
				t.Logf("a normal client's highest score over 100,000 requests: %.2f", worst)
			})

			t.Run("decay", func(t *testing.T) {
				clock := newRepClock()
				addrs, _ := serve(t, be, reputation.Config{Bands: repBands, HalfLife: 10 * time.Minute}, clock, 1)
				ip := repIP(run, 9)
				full := Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(ip)}).Header.Get("X-RateLimit-Limit")
				for i := range 25 {
					require.Equal(t, http.StatusNotFound, Send(t, addrs[0], RawRequest{Path: "/z" + strconv.Itoa(i), Header: fromIP(ip)}).Status)
				}
				n, err := strconv.ParseInt(full, 10, 64)
				require.NoError(t, err)
				assert.Equal(t, strconv.FormatInt(n/2, 10), Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(ip)}).Header.Get("X-RateLimit-Limit"), "suspicious: half the limits")
				clock.advance(9 * time.Minute) // 25 × 2^-0.9 ≈ 13.4, below 20
				assert.Equal(t, full, Send(t, addrs[0], RawRequest{Path: "/", Header: fromIP(ip)}).Header.Get("X-RateLimit-Limit"), "decayed below 20: whole limits again")
			})

			t.Run("shadow", func(t *testing.T) {
				addrs, _ := serve(t, be, reputation.Config{Bands: repBands, Shadow: true}, nil, 1)
				seen, _ := walk(t, addrs[0], 200, func(i int) RawRequest {
					return RawRequest{Path: "/s" + strconv.Itoa(i), Header: fromIP(repIP(run, 10))}
				}, http.StatusForbidden)
				assert.Equal(t, map[int]int{http.StatusNotFound: 200}, seen, "shadow mode bans no one")
			})
		})
	}
}
