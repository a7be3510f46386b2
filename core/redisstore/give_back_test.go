package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// requireDecidedAt requires that got, a time Take or TakeAll returned, is
// a time decided at by Redis: not zero, with no monotonic reading, and
// within a second of the clock; exactly want's microsecond when want is
// not zero.
func requireDecidedAt(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.False(t, got.IsZero(), "%s: a time", what)
	require.Equal(t, got, got.Round(0), "%s: no monotonic reading", what)
	if want.IsZero() {
		require.WithinDuration(t, time.Now(), got, 5*time.Second, "%s: Redis TIME (a busy machine may answer late)", what)
		return
	}
	require.Equal(t, time.UnixMicro(want.UnixMicro()), got, "%s: the explicit time, to the µs", what)
}

// TestDecidedAt: Take and TakeAll return the time they decided at, for
// every algorithm, with and without a lockout, admitted, denied, locked
// out, peeks and give-backs: Redis TIME's microsecond for a zero now, the
// explicit time's for another (one that carries a monotonic reading too),
// never with a monotonic reading. A give-back of everything an admission
// at Redis TIME took, dated with the time it returned, leaves the quota
// whole, in every algorithm: the time is the one the state was written
// at.
func TestDecidedAt(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	for _, locked := range []bool{false, true} {
		for _, a := range limits.Algorithms[core.Algorithm]() {
			p := peekPolicy(a, locked)
			name := fmt.Sprintf("%s/lockout=%v", a, locked)
			for _, now := range []time.Time{{}, time.Now(), time.Now().Add(time.Hour).Round(0)} {
				key := fmt.Sprintf("k%d", now.UnixNano())
				d, at, err := take1(s, ctx, now, core.Request{Key: key, Policy: p, Cost: 3})
				require.NoError(t, err, name)
				require.True(t, d.Allowed, name)
				requireDecidedAt(t, now, at, name+": Take")
				// Give it back, dated at.
				g, gt, err := take1(s, ctx, at, core.Request{Key: key, Policy: p, Cost: -3})
				require.NoError(t, err, name)
				assert.Equal(t, core.Decision{Allowed: true, Limit: 5}, g, "%s: a give-back's decision", name)
				requireDecidedAt(t, at, gt, name+": give-back")
				peek, pt, err := take1(s, ctx, now, core.Request{Key: key, Policy: p})
				require.NoError(t, err, name)
				requireDecidedAt(t, now, pt, name+": peek")
				assert.Equal(t, int64(5), peek.Remaining, "%s: all given back", name)
				// Denied (and locked out, with a lockout).
				for i := range 3 {
					d, dt, err := take1(s, ctx, now, core.Request{Key: key, Policy: p, Cost: 4})
					require.NoError(t, err, name)
					assert.Equal(t, i == 0, d.Allowed, "%s: take %d of 4", name, i)
					assert.Equal(t, locked && i > 0, d.LockedOut, "%s: take %d of 4", name, i)
					requireDecidedAt(t, now, dt, fmt.Sprintf("%s: take %d of 4", name, i))
				}
				// TakeAll: four layers, one with a lockout; peeks; give-backs.
				reqs := fourLayers(key, now)
				// A global key of its own: the one all share was last
				// admitted later than now by the iteration at Redis TIME,
				// and a TakeAll is decided at that admission (see the
				// give-backs' step-back case in core/storetest).
				reqs[0].Key += "-" + key
				out := make([]core.Decision, len(reqs))
				tt, err := takeN(s, ctx, now, reqs, out)
				require.NoError(t, err, name)
				requireDecidedAt(t, now, tt, name+": TakeAll")
				for i := range reqs {
					reqs[i].Cost = 0
				}
				pt, err = takeN(s, ctx, now, reqs, out)
				require.NoError(t, err, name)
				requireDecidedAt(t, now, pt, name+": TakeAll of peeks")
				for i := range reqs {
					reqs[i].Cost = -1
				}
				gt, err = takeN(s, ctx, tt, reqs, out)
				require.NoError(t, err, name)
				requireDecidedAt(t, tt, gt, name+": TakeAll of give-backs")
			}
		}
	}
}

// TestGiveBackWritesNothing: give-backs that have nothing to give back,
// by Take and by TakeAll of three policies, for every algorithm, with and
// without a lockout, leave every key byte for byte as it was, its TTL only
// ticking down, and create none: a key that never was; a state that has
// moved on (another window, the log's member trimmed, the bucket drained
// past it); a log without a member at that microsecond; a state reset.
func TestGiveBackWritesNothing(t *testing.T) {
	algs := limits.Algorithms[core.Algorithm]()
	for _, locked := range []bool{false, true} {
		for ai, a := range algs {
			t.Run(fmt.Sprintf("%s/lockout=%v", a, locked), func(t *testing.T) {
				s, _, c := newStore(t)
				ctx := context.Background()
				t0 := time.Now().Truncate(time.Minute).Add(time.Minute + time.Second)
				ps := []core.Policy{peekPolicy(a, locked), peekPolicy(algs[(ai+1)%len(algs)], locked), peekPolicy(algs[(ai+2)%len(algs)], locked)}
				for _, p := range ps {
					// Moved on: 3 minutes later, a window and a log's
					// window later, the bucket drained of 3 minutes' worth.
					play(t, s, "moved", p, t0, []take{{0, 2}, {3 * time.Minute, 1}})
					play(t, s, "reset", p, t0, []take{{0, 2}})
					require.NoError(t, s.Reset(ctx, "reset", p))
					play(t, s, "locked", p, t0.Add(3*time.Minute), deniedHistory)
				}
				start := time.Now()
				before := stateOf(t, c, s.prefix)
				require.NotEmpty(t, before)
				if locked {
					require.Contains(t, before, lockKey(s.stateKey("locked", ps[0])), "the lockout struck")
				}
				gaveBack := 0
				giveBack := func(key string, at time.Time, cost int64, ps ...core.Policy) {
					t.Helper()
					for _, p := range ps {
						d, gt, err := take1(s, ctx, at, core.Request{Key: key, Policy: p, Cost: -cost})
						require.NoError(t, err, "%s: %s at %v", p.Name, key, at)
						assert.Equal(t, core.Decision{Allowed: true, Limit: 5}, d, "%s: %s", p.Name, key)
						requireDecidedAt(t, at, gt, key)
					}
					reqs := make([]core.Request, len(ps))
					for j, p := range ps {
						reqs[j] = core.Request{Key: key, Policy: p, Cost: -cost}
					}
					out := make([]core.Decision, len(ps))
					gt, err := takeN(s, ctx, at, reqs, out)
					require.NoError(t, err, "%s at %v", key, at)
					requireDecidedAt(t, at, gt, key)
					for j := range out {
						assert.Equal(t, core.Decision{Allowed: true, Limit: 5}, out[j], "%s: %s", ps[j].Name, key)
					}
					gaveBack += 2 * len(ps)
				}
				for _, cost := range []int64{1, 2, 5} {
					giveBack("never", t0, cost, ps...)
					giveBack("moved", t0, cost, ps...)
					giveBack("reset", t0, cost, ps...)
				}
				if a == core.SlidingWindowLog {
					// No member at those microseconds: the log's members
					// are at t0+3m and t0+3m+3ms.
					giveBack("locked", t0.Add(3*time.Minute+time.Microsecond), 5, ps[0])
					giveBack("locked", t0.Add(3*time.Minute+time.Millisecond), 5, ps[0])
					giveBack("moved", t0.Add(3*time.Minute-time.Microsecond), 1, ps[0])
				}
				requireUnchanged(t, c, s.prefix, before, start)
				require.Positive(t, gaveBack)
			})
		}
	}
}

// TestGiveBackKeepsTTLAndLockout: a give-back that gives back changes the
// state only: the key's TTL is kept (only ticking down), a lockout key
// is left byte for byte as it was, the client stays locked out, and no
// strike is added; a log whose every unit is given back is gone.
func TestGiveBackKeepsTTLAndLockout(t *testing.T) {
	for _, a := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(a), func(t *testing.T) {
			s, _, c := newStore(t, withExplicitNowMinTTL(0))
			ctx := context.Background()
			p := peekPolicy(a, true)
			t0 := time.Now()
			d, at, err := take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: 5})
			require.NoError(t, err)
			require.True(t, d.Allowed)
			d, _, err = take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
			require.NoError(t, err)
			require.True(t, d.LockedOut, "the denial locks out")
			key := s.stateKey("k", p)
			start := time.Now() // before the TTLs are read
			lock := stateOf(t, c, lockKey(key))
			require.Len(t, lock, 1)
			ttl := c.PTTL(ctx, key).Val()
			state := snapshot(t, c, key)

			d, _, err = take1(s, ctx, at, core.Request{Key: "k", Policy: p, Cost: -2})
			require.NoError(t, err)
			require.Equal(t, core.Decision{Allowed: true, Limit: 5}, d)
			assert.NotEqual(t, state, snapshot(t, c, key), "the state gave back")
			after := c.PTTL(ctx, key).Val()
			assert.LessOrEqual(t, after, ttl, "PTTL not increased")
			assert.GreaterOrEqual(t, after, ttl-time.Since(start)-testwait.D(time.Second), "PTTL only ticked down (a second, scaled, for a busy machine's gaps)")
			requireUnchanged(t, c, lockKey(key), lock, start)

			d, _, err = take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p})
			require.NoError(t, err)
			assert.True(t, d.LockedOut, "still locked out")
			unlocked := p
			unlocked.Lockout = 0
			d, _, err = take1(s, ctx, at, core.Request{Key: "k", Policy: unlocked})
			require.NoError(t, err)
			assert.Equal(t, int64(2), d.Remaining, "the state alone: 2 of 5 units given back")

			d, _, err = take1(s, ctx, at, core.Request{Key: "k", Policy: p, Cost: -5})
			require.NoError(t, err)
			require.Equal(t, core.Decision{Allowed: true, Limit: 5}, d)
			d, _, err = take1(s, ctx, at, core.Request{Key: "k", Policy: unlocked})
			require.NoError(t, err)
			assert.Equal(t, int64(5), d.Remaining, "all given back, and no more: a give-back of more than is left empties the state")
			if a == core.SlidingWindowLog {
				assert.Zero(t, c.Exists(ctx, key).Val(), "the log's last member is gone, and the log")
			} else {
				assert.Positive(t, c.PTTL(ctx, key).Val(), "the state stays, its TTL kept")
			}
			requireUnchanged(t, c, lockKey(key), lock, start)
			assert.Less(t, time.Since(t0), 30*time.Second, "the lockout has not ended meanwhile")
		})
	}
}

// TestGiveBackOneRoundTrip: a TakeAll of give-backs over one Redis is one
// script run, over the batcher or not, whatever algorithms its requests
// have, and gives back in every one of them.
func TestGiveBackOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []string{"bounded", "direct"} {
		t.Run(mode, func(t *testing.T) {
			opts := srv.Options()
			opts.ContextTimeoutEnabled = mode == "direct"
			c := redis.NewClient(opts)
			t.Cleanup(func() { _ = c.Close() })
			h := newCommandCounter()
			c.AddHook(h)
			s := mustNew(t, c, WithPrefix(testPrefix(t)))
			<-s.checked
			ctx := context.Background()
			reqs := fourLayers("a", time.Time{})
			for i := range reqs {
				reqs[i].Cost = 3
			}
			out := make([]core.Decision, len(reqs))
			at, err := takeN(s, ctx, time.Time{}, reqs, out)
			require.NoError(t, err)
			for i := range reqs {
				reqs[i].Cost = -3
			}
			// The script loaded (a NOSCRIPT's EVAL is not counted): a
			// give-back that gives nothing back, at another time.
			require.NoError(t, errOf(takeN(s, ctx, at.Add(-time.Hour), reqs, out)))
			h.reset()
			gt, err := takeN(s, ctx, at, reqs, out)
			require.NoError(t, err)
			assert.Equal(t, at, gt)
			names, pipelines := h.snapshot()
			assert.Equal(t, map[string]int{"evalsha": 1}, names, "one script run")
			assert.Zero(t, pipelines)
			for i, r := range reqs {
				assert.Equal(t, core.Decision{Allowed: true, Limit: limits.Capacity(r.Policy.Algorithm, r.Policy.Limit, r.Policy.Burst)}, out[i], "layer %d", i)
				r.Cost = 0
				r.Policy.Lockout = 0
				d, _, err := take1(s, ctx, at, r)
				require.NoError(t, err)
				assert.Equal(t, d.Limit, d.Remaining, "layer %d: all given back", i)
			}
		})
	}
}

// TestGiveBackBadInput: a give-back without the time of its admission, one
// beyond the capacity, and a TakeAll that mixes give-backs with takes or
// peeks are invalid input, refused before any round trip.
func TestGiveBackBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	h := newCommandCounter()
	c.AddHook(h)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	<-s.checked
	h.reset()
	ctx := context.Background()
	now := time.Now()
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	_, at, err := take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: -1})
	assert.ErrorIs(t, err, core.ErrInvalidOption, "a give-back at a zero now")
	assert.True(t, at.IsZero())
	_, _, err = take1(s, ctx, now, core.Request{Key: "k", Policy: p, Cost: -6})
	assert.ErrorIs(t, err, core.ErrInvalidOption, "a give-back beyond the capacity")
	reqs := fourLayers("a", time.Time{})
	for i := range reqs {
		reqs[i].Cost = -1
	}
	out := make([]core.Decision, len(reqs))
	assert.ErrorIs(t, errOf(takeN(s, ctx, time.Time{}, reqs, out)), core.ErrInvalidOption, "give-backs at a zero now")
	for _, cost := range []int64{0, 1} {
		mixed := append([]core.Request(nil), reqs...)
		mixed[2].Cost = cost
		assert.ErrorIs(t, errOf(takeN(s, ctx, now, mixed, out)), core.ErrInvalidOption, "give-backs with cost %d", cost)
		mixed[0].Cost, mixed[2].Cost = cost, -1
		assert.ErrorIs(t, errOf(takeN(s, ctx, now, mixed, out)), core.ErrInvalidOption, "cost %d with give-backs", cost)
	}
	names, pipelines := h.snapshot()
	assert.Empty(t, names, "commands")
	assert.Zero(t, pipelines)
	// -capacity is a give-back like any.
	d, _, err := take1(s, ctx, now, core.Request{Key: "k", Policy: p, Cost: -5})
	require.NoError(t, err)
	assert.Equal(t, core.Decision{Allowed: true, Limit: 5}, d)
}
