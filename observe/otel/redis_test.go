package otellimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

const (
	// redisTimeout is the Limiters' timeout over the frozen Redis. Their
	// healthy decisions, before the freeze, are checked one by one (an
	// exact count of outcomes), so none may outlast it: a second, which a
	// warm round trip to a live Redis does not reach even on a busy
	// machine, as 50ms could.
	redisTimeout = time.Second
	// redisProbe is their breaker's probe interval: the decisions made once
	// it opens are made at the instant it opened (AllowAt), all without the
	// store.
	redisProbe = 300 * time.Millisecond
)

// TestRedisOutage drives Limiters over a real Redis through health, a
// freeze (timeouts, then the open breaker), the recovery and a kill, and
// checks every series against what the Limiters reported, and against the
// counts the traffic must give where they do not depend on timing.
func TestRedisOutage(t *testing.T) {
	srv := redistest.StartWith(t) // a server of its own, even with REDIS_URL: it is frozen and killed
	opts := srv.Options()
	opts.MaxRetries, opts.DialerRetries = -1, 1 // a dead server fails at once
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.WithPrefix("otellimit-test:"), redisstore.WithTimeout(redisTimeout))
	require.NoError(t, err)

	ctx := context.Background()
	// Dial and load the script first, unhurried: a first decision's dial
	// and NOSCRIPT round trips are no part of the healthy phase.
	wctx, cancel := context.WithTimeout(ctx, testwait.D(10*time.Second))
	defer cancel()
	_, _, err = storecall.Take(rs, wctx, time.Time{}, core.Request{Key: "warm-up", Policy: core.Policy{Name: "warm-up", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}, Cost: 1})
	require.NoError(t, err)

	m, r := newMetrics(t)
	ref := newTally()
	mk := func(name string, opts ...core.Option) *core.Limiter {
		p := core.Policy{Name: name, Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}
		if name == "redis-closed" {
			p.FailClosed = time.Second
		}
		opts = append(opts, core.WithCircuitBreaker(2, redisProbe),
			core.WithObserver(m), core.WithObserver(ref))
		return newLimiter(t, rs, p, opts...)
	}
	fb := mk("redis-fallback", core.WithFallback(newMemStore(t)))
	closed := mk("redis-closed")
	open := mk("redis-open", core.WithDenyCache(10))
	lims := []*core.Limiter{fb, closed, open}
	at := func(s snapshot, name, limit string, kv ...string) float64 {
		return s.values[series(name, append([]string{"limit", limit}, kv...)...)]
	}

	// Healthy: 5 admitted, 2 denied (the second from the deny cache for
	// redis-open).
	for _, l := range lims {
		for i := range 7 {
			d, err := l.AllowN(ctx, "k", 1, time.Time{})
			require.NoError(t, err)
			require.Equal(t, i < 5, d.Allowed, "%s request %d", l.Policies()[0].Name, i)
		}
	}
	s := collect(t, r)
	requireMatches(t, ref, s)
	for _, l := range lims {
		name := l.Policies()[0].Name
		assert.Equal(t, 5.0, at(s, decisions, name, "outcome", "allowed"), name)
		assert.Equal(t, 1.0, at(s, nearLimit, name), name)
		assert.Equal(t, 1.0, at(s, health, name, "state", "healthy"), name)
	}
	assert.Equal(t, 2.0, at(s, decisions, "redis-fallback", "outcome", "denied"))
	assert.Equal(t, 2.0, at(s, decisions, "redis-closed", "outcome", "denied"))
	assert.Equal(t, 1.0, at(s, decisions, "redis-open", "outcome", "denied"))
	assert.Equal(t, 1.0, at(s, decisions, "redis-open", "outcome", "deny_cache"))
	assert.Equal(t, 7.0, float64(s.counts[series(duration, "limit", "redis-fallback")]), "every Redis decision is timed")
	assert.Equal(t, 6.0, float64(s.counts[series(duration, "limit", "redis-open")]), "the deny cache asks no store")

	// Frozen: two timeouts open the breaker, three more decisions are made
	// without Redis. redis-fallback's fallback admits a new client and
	// denies "k", whose admissions it mirrored.
	srv.Freeze()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	// Each limiter's five decisions are made at one instant (AllowAt), on
	// which the breaker counts its probe interval: the three made once it
	// opened come within the interval, however slow the machine.
	for _, l := range lims {
		at := time.Now()
		for i := range 5 {
			key := "new"
			if i >= 2 && l == fb {
				key = "k"
			}
			d, err := l.AllowN(ctx, key, 1, at)
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, limits.ErrStore)
			if i < 2 {
				require.ErrorIs(t, d.Err, context.DeadlineExceeded)
			} else {
				require.ErrorIs(t, d.Err, limits.ErrCircuitOpen)
			}
		}
	}
	s = collect(t, r)
	requireMatches(t, ref, s)
	for _, l := range lims {
		name := l.Policies()[0].Name
		assert.Equal(t, 2.0, at(s, storeErrs, name, "kind", "timeout"), name)
		assert.Equal(t, 3.0, at(s, storeErrs, name, "kind", "circuit_open"), name)
		assert.Equal(t, 0.0, at(s, storeErrs, name, "kind", "error"), name)
		assert.Equal(t, 1.0, at(s, health, name, "state", "failing"), name)
		assert.Equal(t, 0.0, at(s, health, name, "state", "healthy"), name)
	}
	assert.Equal(t, 2.0, at(s, decisions, "redis-fallback", "outcome", "fallback_allowed"))
	assert.Equal(t, 3.0, at(s, decisions, "redis-fallback", "outcome", "fallback_denied"))
	assert.Equal(t, 5.0, at(s, decisions, "redis-closed", "outcome", "failed_closed"))
	assert.Equal(t, 5.0, at(s, decisions, "redis-open", "outcome", "failed_open"))
	// A timeout is timed (the wait); a decision without the store is not.
	assert.Equal(t, 9.0, float64(s.counts[series(duration, "limit", "redis-fallback")]))
	assert.Equal(t, 8.0, float64(s.counts[series(duration, "limit", "redis-open")]))
	assert.GreaterOrEqual(t, s.sums[series(duration, "limit", "redis-closed")], 2*redisTimeout.Seconds())

	// Thawed: a probe closes the breaker; redis-fallback is recovering,
	// the others healthy.
	srv.Thaw()
	thawed = true
	for _, l := range lims {
		require.Eventually(t, func() bool {
			d, err := l.AllowN(ctx, "after", 1, time.Time{})
			return err == nil && d.Source == core.SourceStore
		}, testwait.D(15*time.Second), 20*time.Millisecond, l.Policies()[0].Name)
	}
	s = collect(t, r)
	requireMatches(t, ref, s)
	assert.Equal(t, 1.0, at(s, health, "redis-fallback", "state", "recovering"))
	assert.Equal(t, 1.0, at(s, health, "redis-closed", "state", "healthy"))
	assert.Equal(t, 1.0, at(s, health, "redis-open", "state", "healthy"))

	// Killed: the store fails with a refused connection (or, on a loaded
	// machine, a timeout if the dial outlasts the budget) until the breaker
	// opens again.
	srv.Kill()
	for _, l := range lims {
		for range 2 {
			d, err := l.AllowN(ctx, "killed", 1, time.Time{})
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, limits.ErrStore)
		}
	}
	s = collect(t, r)
	requireMatches(t, ref, s)
	errs := 0.0
	for _, l := range lims {
		name := l.Policies()[0].Name
		assert.Equal(t, 1.0, at(s, health, name, "state", "failing"), name)
		errs += at(s, storeErrs, name, "kind", "error")
		assert.Equal(t, 4.0, at(s, storeErrs, name, "kind", "error")+at(s, storeErrs, name, "kind", "timeout"), name)
	}
	assert.Positive(t, errs, "no store error of kind error from a killed Redis")
}
