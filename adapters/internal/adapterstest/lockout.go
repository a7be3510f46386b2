package adapterstest

import (
	"context"
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
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// Clock is a test clock that a test moves by hand.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock {
	c := new(Clock)
	c.ns.Store(t.UnixNano())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// clocked gives every Request without a Now the clock's time.
type clocked struct {
	core.Store
	c *Clock
}

// AtClock returns s deciding at c's time.
func AtClock(s core.Store, c *Clock) core.Store { return clocked{s, c} }

func (s clocked) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if now.IsZero() {
		now = s.c.Now()
	}
	_, err := s.Store.Take(ctx, now, reqs, out)
	return time.Time{}, err // decided as elsewhere: a store the Limiter times
}

func (s clocked) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if now.IsZero() {
		now = s.c.Now()
	}
	return s.Store.Peek(ctx, now, reqs, out)
}

// loginPolicy is the login guard: 5 attempts per 15 minutes, then
// locked out for 30 minutes, doubling with each offence up to 2 hours.
var loginPolicy = core.Policy{
	Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
	Lockout: 30 * time.Minute, LockoutMax: 2 * time.Hour,
}

// RunLockout checks brute-force lockouts over real sockets, to the second
// with a test clock, on a memory store and on Redis; on Redis with two app
// servers (two Limiters, two apps) sharing the lockout: a client locked out
// on one is locked out on the other. A locked-out client gets 429 with
// Retry-After the time left on its lockout; each offence remembered doubles
// the lockout up to its cap; Limiter.Reset (a good login) clears it all.
func RunLockout(t *testing.T, h SocketHarness, srv *redistest.Server) {
	var prefixes atomic.Int64
	stores := []struct {
		name    string
		servers int
		new     func(t testing.TB) core.Store
	}{
		{"memory", 1, func(t testing.TB) core.Store { return NewStore(t) }},
		{"redis, two servers", 2, func(t testing.TB) core.Store {
			s, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("lockout%d:", prefixes.Add(1))), redisstore.WithTimeout(limitertest.StoreTimeout))
			require.NoError(t, err)
			return s
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			clock := NewClock(T0)
			store := st.new(t)
			var limiters []*core.Limiter
			var addrs []string
			for range st.servers {
				// Each server its own Limiter and app; the store's state is
				// shared (Redis), or there is one server (memory).
				f := NewFlow(t, AtClock(store, clock), []httplimit.Layer{{Policy: loginPolicy}}, nil)
				limiters = append(limiters, f.Limiter())
				addrs = append(addrs, h.Serve(t, &Spec{Routes: []Route{{Method: "POST", Path: "/login", Limits: []Mount{{Flow: f}}}}}))
			}
			n := 0
			login := func(status int, retryAfter int64, remaining string) {
				t.Helper()
				addr := addrs[n%len(addrs)] // alternate servers
				n++
				res := Send(t, addr, RawRequest{Method: "POST", Path: "/login"})
				require.Equal(t, status, res.Status, "attempt %d at %s: %s", n, clock.Now().Sub(T0), res.Body)
				assert.Equal(t, remaining, res.Header.Get("X-RateLimit-Remaining"), "attempt %d", n)
				if status == http.StatusTooManyRequests {
					assert.Equal(t, strconv.FormatInt(retryAfter, 10), res.Header.Get("Retry-After"), "attempt %d at %s", n, clock.Now().Sub(T0))
					assert.Equal(t, exceededBody(strconv.FormatInt(retryAfter, 10)), res.Body, "attempt %d", n)
				} else {
					assert.Empty(t, res.Header.Get("Retry-After"))
				}
			}
			five := func() {
				t.Helper()
				for i := int64(4); i >= 0; i-- {
					login(200, 0, strconv.FormatInt(i, 10))
				}
			}
			five()
			login(429, 1800, "0") // the sixth attempt: the first offence, 30 minutes
			clock.Advance(10 * time.Minute)
			login(429, 1200, "0") // still locked, whichever server: 20 minutes left
			clock.Advance(19*time.Minute + 59*time.Second)
			login(429, 1, "0") // one second left
			clock.Advance(time.Second)
			five()                // the lockout is over, the window has passed
			login(429, 3600, "0") // second offence within memory: doubled
			clock.Advance(time.Hour)
			five()
			login(429, 7200, "0") // third: 2 hours, the cap
			clock.Advance(2 * time.Hour)
			five()
			login(429, 7200, "0") // capped
			// A good login clears the lockout and the strikes.
			require.NoError(t, limiters[len(limiters)-1].Reset(context.Background(), "ip:127.0.0.1"))
			five()
			login(429, 1800, "0") // a first offence again
		})
	}
}
