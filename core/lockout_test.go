package core_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// lockout is a policy's three lockout fields, with the lengths the stores
// compute from them (internal/rules/limits).
type lockout struct{ Duration, Max, Memory time.Duration }

func (lo lockout) Length(strike int) time.Duration {
	return limits.LockoutLength(lo.Duration, lo.Max, strike)
}
func (lo lockout) Cap() time.Duration { return limits.LockoutCap(lo.Duration, lo.Max) }
func (lo lockout) RememberFor() time.Duration {
	return limits.LockoutMemory(lo.Duration, lo.Max, lo.Memory)
}
func (lo lockout) Enabled() bool { return lo.Duration > 0 }

func TestLockoutValidate(t *testing.T) {
	base := core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: 15 * time.Minute}
	for _, c := range []struct {
		name    string
		lockout lockout
		reason  string // "" means valid
	}{
		{"none", lockout{}, ""},
		{"duration only", lockout{Duration: 30 * time.Minute}, ""},
		{"escalating", lockout{Duration: 30 * time.Minute, Max: 24 * time.Hour}, ""},
		{"with memory", lockout{Duration: time.Second, Max: time.Minute, Memory: time.Minute}, ""},
		{"at the bounds", lockout{Duration: limits.MaxLockout, Max: limits.MaxLockout, Memory: limits.MaxLockoutMemory}, ""},
		{"min duration", lockout{Duration: limits.MinLockout}, ""},
		{"negative duration", lockout{Duration: -time.Second}, "lockout duration -1s"},
		{"duration under 1ms", lockout{Duration: time.Microsecond}, "lockout duration 1µs"},
		{"duration over a year", lockout{Duration: limits.MaxLockout + 1}, "lockout duration"},
		{"huge duration", lockout{Duration: math.MaxInt64}, "lockout duration"},
		{"max without duration", lockout{Max: time.Hour}, "without a duration"},
		{"memory without duration", lockout{Memory: time.Hour}, "without a duration"},
		{"max below duration", lockout{Duration: time.Hour, Max: time.Minute}, "lockout max 1m0s"},
		{"negative max", lockout{Duration: time.Hour, Max: -time.Hour}, "lockout max -1h0m0s"},
		{"huge max", lockout{Duration: time.Hour, Max: math.MaxInt64}, "lockout max"},
		{"memory shorter than the cap", lockout{Duration: time.Minute, Max: time.Hour, Memory: 59 * time.Minute}, "lockout memory 59m0s"},
		{"memory shorter than the duration", lockout{Duration: time.Hour, Memory: time.Minute}, "lockout memory 1m0s"},
		{"negative memory", lockout{Duration: time.Hour, Memory: -1}, "lockout memory"},
		{"huge memory", lockout{Duration: time.Hour, Memory: math.MaxInt64}, "lockout memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := base
			p.Lockout, p.LockoutMax, p.LockoutMemory = c.lockout.Duration, c.lockout.Max, c.lockout.Memory
			err := p.Validate()
			_, nerr := core.NewLimiter(newMemStore(t), []core.Policy{p})
			if c.reason == "" {
				require.NoError(t, err)
				require.NoError(t, nerr)
				return
			}
			for _, err := range []error{err, nerr} {
				require.ErrorIs(t, err, core.ErrInvalidOption)
				assert.Contains(t, err.Error(), c.reason)
			}
		})
	}
}

func TestLockoutLength(t *testing.T) {
	lo := lockout{Duration: 30 * time.Minute, Max: 4 * time.Hour}
	for strike, want := range map[int]time.Duration{
		-1: 0, 0: 0, 1: 30 * time.Minute, 2: time.Hour, 3: 2 * time.Hour, 4: 4 * time.Hour, 5: 4 * time.Hour,
		63: 4 * time.Hour, 64: 4 * time.Hour, 1000: 4 * time.Hour, math.MaxInt: 4 * time.Hour,
	} {
		assert.Equal(t, want, lo.Length(strike), "strike %d", strike)
	}
	assert.Equal(t, 4*time.Hour, lo.Cap())
	assert.Equal(t, limits.DefaultLockoutMemory, lo.RememberFor())

	// No escalation: Max 0 caps at Duration.
	flat := lockout{Duration: time.Minute}
	assert.Equal(t, time.Minute, flat.Length(1))
	assert.Equal(t, time.Minute, flat.Length(10))
	assert.Equal(t, time.Minute, flat.Cap())

	// The default memory covers twice the longest lockout, up to its bound.
	assert.Equal(t, 20*24*time.Hour, lockout{Duration: time.Hour, Max: 10 * 24 * time.Hour}.RememberFor())
	assert.Equal(t, limits.MaxLockoutMemory, lockout{Duration: limits.MaxLockout}.RememberFor())
	assert.Equal(t, time.Minute, lockout{Duration: time.Second, Memory: time.Minute}.RememberFor())
	assert.Zero(t, lockout{}.RememberFor())
	assert.Zero(t, lockout{}.Length(1))
	assert.False(t, lockout{}.Enabled())

	// From a millisecond to the longest lockout: doubling never
	// overflows, and reaches the cap at the 35th strike.
	wide := lockout{Duration: limits.MinLockout, Max: limits.MaxLockout}
	prev := time.Duration(0)
	for strike := 1; strike <= 100; strike++ {
		got := wide.Length(strike)
		require.Positive(t, got, "strike %d", strike)
		require.LessOrEqual(t, got, limits.MaxLockout, "strike %d", strike)
		require.GreaterOrEqual(t, got, prev, "strike %d", strike)
		prev = got
	}
	assert.Less(t, wide.Length(35), limits.MaxLockout)
	assert.Equal(t, limits.MaxLockout, wide.Length(36))

	// Stores count to the microsecond.
	assert.Equal(t, 2*time.Millisecond+2*time.Microsecond, lockout{Duration: time.Millisecond + time.Microsecond + 999, Max: time.Second}.Length(2))
}

// TestLimiterLockout: the login of the issue through a Limiter over a
// memory store, at explicit times, the observers hearing locked_out; a
// Reset forgives.
func TestLimiterLockout(t *testing.T) {
	rec := &recorder{}
	p := core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
		Lockout: 30 * time.Minute, LockoutMax: 2 * time.Hour}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(rec))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 {
		d, err := l.AllowN(ctx, "alice", 1, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
		require.True(t, d.Allowed, "attempt %d", i+1)
		assert.Equal(t, outcome.Allowed, outcomeOf(rec.last(t)))
	}
	d, err := l.AllowN(ctx, "alice", 1, t0.Add(5*time.Second))
	require.NoError(t, err)
	assert.Equal(t, core.Decision{Limit: 5, ResetAfter: 30 * time.Minute, RetryAfter: 30 * time.Minute, LockedOut: true, Policy: l.Policies()[0]}, d)
	e := rec.last(t)
	assert.Equal(t, outcome.LockedOut, outcome.Of(&e.Decision))
	assert.False(t, outcome.NearLimit(&e.Decision))

	d, err = l.AllowN(ctx, "alice", 1, t0.Add(10*time.Minute))
	require.NoError(t, err)
	assert.True(t, d.LockedOut)
	assert.Equal(t, 20*time.Minute+5*time.Second, d.RetryAfter)
	assert.Equal(t, outcome.LockedOut, outcomeOf(rec.last(t)))

	// Another client is not locked out.
	d, err = l.AllowN(ctx, "bob", 1, t0.Add(10*time.Minute))
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	// A good login: Reset forgives the lockout and the strikes.
	require.NoError(t, l.Reset(ctx, "alice"))
	d, err = l.AllowN(ctx, "alice", 1, t0.Add(10*time.Minute))
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(4), d.Remaining)
}

// TestLockoutDenyCache: a lockout's denial is remembered, LockedOut and
// all, until the lockout ends.
func TestLockoutDenyCache(t *testing.T) {
	rec := &recorder{}
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second, Lockout: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithDenyCache(10), core.WithObserver(rec))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.AllowN(ctx, "k", 1, t0)
	require.NoError(t, err)
	d, err := l.AllowN(ctx, "k", 1, t0)
	require.NoError(t, err)
	require.True(t, d.LockedOut)
	d, err = l.AllowN(ctx, "k", 1, t0.Add(30*time.Second))
	require.NoError(t, err)
	assert.Equal(t, core.SourceDenyCache, d.Source)
	assert.True(t, d.LockedOut)
	assert.Equal(t, 30*time.Second, d.RetryAfter)
	assert.Equal(t, outcome.DenyCache, outcomeOf(rec.last(t)))
	d, err = l.AllowN(ctx, "k", 1, t0.Add(time.Minute))
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// TestLockoutFallbackMirrorStrikesNoOne: the fallback mirrors what the
// store admits without a lockout of its own; when it decides alone, it
// locks out on its own counts.
func TestLockoutFallbackMirrorStrikesNoOne(t *testing.T) {
	s := &switchStore{}
	local := newMemStore(t)
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour, Lockout: 2 * time.Hour}
	l, err := core.NewLimiter(s, []core.Policy{p}, core.WithFallback(local))
	require.NoError(t, err)
	ctx := context.Background()
	// switchStore admits everything: the mirror overflows the fallback's
	// count of 1, which must not lock anyone out there.
	for range 3 {
		d, err := l.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// Struck by the mirror, it would be locked out until t0+2h.
	fd, _, err := storecall.Take(local, ctx, t0.Add(time.Minute), core.Request{Key: "k", Policy: l.Policies()[0], Cost: 1})
	require.NoError(t, err)
	assert.False(t, fd.Allowed)
	assert.True(t, fd.LockedOut)
	assert.Equal(t, 2*time.Hour, fd.RetryAfter, "the fallback's own first offence")
}
