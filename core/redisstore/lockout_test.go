package redisstore

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// lockout is a policy's three lockout fields.
type lockout struct{ Duration, Max, Memory time.Duration }

// lockoutPolicies returns policies(l, w) with lo.
func lockoutPolicies(l int64, w time.Duration, lo lockout) []core.Policy {
	ps := policies(l, w)
	for i := range ps {
		ps[i].Lockout, ps[i].LockoutMax, ps[i].LockoutMemory = lo.Duration, lo.Max, lo.Memory
	}
	return ps
}

// TestLockoutRealTime: over Redis TIME, 2 per 200ms, a lockout of 300ms
// doubling to 1.2s. Each offence's RetryAfter is its lockout exactly
// (the algorithm's own wait is shorter), every request during it is
// denied, and the first request of the offence's cost once it has ended
// passes: polled, with a
// bounded deadline, never slept on blindly.
func TestLockoutRealTime(t *testing.T) {
	s, _, _ := newStore(t)
	lo := lockout{Duration: 300 * time.Millisecond, Max: 1200 * time.Millisecond, Memory: time.Minute}
	for _, p := range lockoutPolicies(2, 200*time.Millisecond, lo) {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			t.Parallel()
			l, err := core.NewLimiter(s, []core.Policy{p})
			require.NoError(t, err)
			ctx := context.Background()
			for strike, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 1200 * time.Millisecond, 1200 * time.Millisecond} {
				// Spend the quota: what is left of it, then the offence.
				// sent is when the request that began the lockout was
				// sent: the lockout began after it, however long its
				// answer took to come back on a busy machine, so the
				// times below are counted from it.
				var d core.Decision
				var sent time.Time
				for !d.LockedOut {
					sent = time.Now()
					d, err = l.AllowN(ctx, "client", 1, time.Time{})
					require.NoError(t, err)
				}
				require.False(t, d.Allowed, "strike %d", strike+1)
				require.Equal(t, want, d.RetryAfter, "strike %d: RetryAfter is the lockout", strike+1)
				require.Zero(t, d.Remaining)
				// Locked out, whatever the cost, until it ends: then the
				// algorithm admits the request of the offence's cost,
				// the lockout having lasted at least until it would.
				// (Checked when it was decided surely within the lockout: a
				// busy machine may take that long between the two.)
				d, err = l.AllowN(ctx, "client", 2, time.Time{})
				require.NoError(t, err)
				if took := time.Since(sent); took < want-50*time.Millisecond {
					require.True(t, d.LockedOut, "strike %d: a costlier request during the lockout", strike+1)
				} else {
					t.Logf("strike %d: the costlier request was decided up to %v after the lockout began: not checked", strike+1, took)
				}
				// The condition runs on a goroutine of its own: it
				// reports with assert, and the passage time is read once
				// Eventually has returned.
				var passed atomic.Int64
				require.Eventually(t, func() bool {
					d, err := l.AllowN(ctx, "client", 1, time.Time{})
					if !assert.NoError(t, err) {
						return false
					}
					if d.Allowed {
						passed.Store(int64(time.Since(sent)))
						return true
					}
					assert.True(t, d.LockedOut, "denied during the lockout by the lockout")
					assert.LessOrEqual(t, d.RetryAfter, want)
					return false
				}, want+testwait.D(2*time.Second), 10*time.Millisecond, "strike %d: the lockout ends", strike+1)
				assert.GreaterOrEqual(t, time.Duration(passed.Load()), want-50*time.Millisecond, "strike %d: the lockout lasted", strike+1)
			}
			// A good login: Reset forgives, and the next offence is the
			// first again.
			require.NoError(t, l.Reset(ctx, "client"))
			var d core.Decision
			for !d.LockedOut {
				d, err = l.AllowN(ctx, "client", 1, time.Time{})
				require.NoError(t, err)
			}
			assert.Equal(t, 300*time.Millisecond, d.RetryAfter, "after Reset")
		})
	}
}

// TestLockoutOneRoundTrip: a policy with a lockout still costs one EVALSHA
// per decision, locked out or not.
func TestLockoutOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	hook := newCommandCounter()
	c.AddHook(hook)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	waitChecked(t, s, 10*time.Second)
	ctx := context.Background()
	ps := lockoutPolicies(2, time.Minute, lockout{Duration: time.Hour})
	for _, p := range ps { // loads the scripts
		_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "warm", Policy: p, Cost: 1})
		require.NoError(t, err)
	}
	hook.reset()
	const n = 5
	for _, p := range ps {
		for i := range n {
			d, _, err := take1(s, ctx, t0, core.Request{Key: "k", Policy: p, Cost: 1})
			require.NoError(t, err)
			require.Equal(t, i < 2, d.Allowed, "%s: request %d", p.Algorithm, i)
			require.Equal(t, i >= 2, d.LockedOut, "%s: request %d", p.Algorithm, i)
		}
	}
	names, pipelines := hook.snapshot()
	require.Equal(t, map[string]int{"evalsha": n * len(ps)}, names)
	require.Zero(t, pipelines)
}

// TestLockoutKeys: the lockout key sits beside the state key, in its hash
// tag; its TTL is the later of the lockout's end and the strikes' memory,
// and Reset deletes it with the state.
func TestLockoutKeys(t *testing.T) {
	s, _, c := newStore(t, withExplicitNowMinTTL(0))
	ctx := context.Background()
	lo := lockout{Duration: 10 * time.Second, Max: 40 * time.Second, Memory: 2 * time.Minute}
	for _, p := range lockoutPolicies(1, time.Second, lo) {
		state := s.stateKey("user:42", p)
		lock := state + ":lock"
		assert.True(t, strings.HasPrefix(lock, s.prefix+"{user:42}:"), "%s: %s in the client's hash tag", p.Algorithm, lock)
		now := time.Now()
		for range 2 {
			_, _, err := take1(s, ctx, now, core.Request{Key: "user:42", Policy: p, Cost: 1})
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, c.Exists(ctx, lock).Val(), "%s: lock key written", p.Algorithm)
		ttl := c.PTTL(ctx, lock).Val()
		assert.LessOrEqual(t, ttl, 2*time.Minute, "%s: the lock key lives as long as the strikes' memory", p.Algorithm)
		assert.Greater(t, ttl, 2*time.Minute-10*time.Second, "%s", p.Algorithm)
		// A request during the lockout writes nothing.
		dump := c.Dump(ctx, lock).Val()
		stateDump := c.Dump(ctx, state).Val()
		d, _, err := take1(s, ctx, now.Add(5*time.Second), core.Request{Key: "user:42", Policy: p, Cost: 1})
		require.NoError(t, err)
		require.True(t, d.LockedOut)
		assert.Equal(t, 5*time.Second, d.RetryAfter)
		assert.Equal(t, dump, c.Dump(ctx, lock).Val(), "%s: the lock during the lockout", p.Algorithm)
		assert.Equal(t, stateDump, c.Dump(ctx, state).Val(), "%s: the state during the lockout", p.Algorithm)

		require.NoError(t, s.Reset(ctx, "user:42", p))
		assert.EqualValues(t, 0, c.Exists(ctx, lock, state).Val(), "%s: keys left after Reset", p.Algorithm)
	}
	// A policy without a lockout writes no lock key.
	p := core.Policy{Name: "plain", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}
	for range 3 {
		_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "user:42", Policy: p, Cost: 1})
		require.NoError(t, err)
	}
	assert.EqualValues(t, 0, c.Exists(ctx, s.stateKey("user:42", p)+":lock").Val())
}

// TestLockoutMatchesMemstore: the same random history, lockouts and all,
// gives the same Decisions in both stores.
func TestLockoutMatchesMemstore(t *testing.T) {
	s, _, _ := newStore(t)
	m := newMemStore(t)
	ctx := context.Background()
	lo := lockout{Duration: 700 * time.Millisecond, Max: 5 * time.Second, Memory: 20 * time.Second}
	for _, p := range lockoutPolicies(3, time.Second, lo) {
		at := t0
		var lockedOut, allowed int
		for i := range 400 {
			at = at.Add(time.Duration((i*7919)%900) * time.Millisecond / 3)
			req := core.Request{Key: "k", Policy: p, Cost: 1 + int64(i%3)}
			rd, _, err := take1(s, ctx, at, req)
			require.NoError(t, err)
			md, _, err := take1(m, ctx, at, req)
			require.NoError(t, err)
			require.Equal(t, md, rd, "%s: request %d at %v", p.Algorithm, i, at.Sub(t0))
			if rd.LockedOut {
				lockedOut++
			}
			if rd.Allowed {
				allowed++
			}
		}
		assert.Greater(t, lockedOut, 50, "%s: lockouts", p.Algorithm)
		assert.Greater(t, allowed, 10, "%s: admissions between them", p.Algorithm)
	}
}

// TestLockoutOnCluster: both keys of a decision are in one slot of a real
// Redis Cluster, so a lockout decides there as on one node.
func TestLockoutOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := mustNew(t, cl.Client(), WithPrefix(testPrefix(t)))
	ctx := context.Background()
	for _, p := range lockoutPolicies(1, time.Minute, lockout{Duration: time.Hour}) {
		for i, key := range []string{"a", "b", "c", "d", "e", "f"} {
			d, _, err := take1(s, ctx, t0, core.Request{Key: key, Policy: p, Cost: 1})
			require.NoError(t, err, "%s %d", p.Algorithm, i)
			require.True(t, d.Allowed)
			d, _, err = take1(s, ctx, t0, core.Request{Key: key, Policy: p, Cost: 1})
			require.NoError(t, err, "%s %d", p.Algorithm, i)
			require.True(t, d.LockedOut)
			require.Equal(t, time.Hour, d.RetryAfter)
			require.NoError(t, s.Reset(ctx, key, p))
		}
	}
}
