package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/limits"
)

// TestShadowDecidesAndRecordsButNeverDenies: in shadow mode the store
// counts exactly as it would, denials pass marked Shadowed with the
// denial's fields, and the observers hear shadow_denied.
func TestShadowDecidesAndRecordsButNeverDenies(t *testing.T) {
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}
	s := newMemStore(t)
	rec := &recorder{}
	shadow, err := core.NewLimiter(s, p, core.WithShadow(), core.WithObserver(rec))
	require.NoError(t, err)
	enforcing, err := core.NewLimiter(s, p) // same store, same name: same counts
	require.NoError(t, err)
	assert.True(t, shadow.Shadow())
	assert.False(t, enforcing.Shadow())
	ctx := context.Background()

	for i := range 2 {
		d, err := shadow.AllowAt(ctx, "k", t0)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.False(t, d.Shadowed, "request %d: admitted, not shadowed", i)
		assert.Equal(t, core.OutcomeAllowed, rec.last(t).Outcome)
	}
	d, err := shadow.AllowAt(ctx, "k", t0.Add(10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, core.Decision{Allowed: true, Shadowed: true, Limit: 2, ResetAfter: 50 * time.Second,
		RetryAfter: 50 * time.Second, Policy: shadow.Policy()}, d)
	e := rec.last(t)
	assert.Equal(t, core.OutcomeShadowDenied, e.Outcome)
	assert.True(t, e.Outcome.Admitted())
	assert.False(t, e.NearLimit(), "past the limit, not near it")
	assert.Equal(t, d, e.Decision)

	// The shadow limiter's admissions were recorded: the enforcing one
	// denies.
	d, err = enforcing.AllowAt(ctx, "k", t0.Add(10*time.Second))
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.False(t, d.Shadowed)
}

// TestShadowWithoutObservers: the path without observers shades too.
func TestShadowWithoutObservers(t *testing.T) {
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 1, Window: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), p, core.WithShadow())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.AllowAt(ctx, "k", t0)
	require.NoError(t, err)
	d, err := l.AllowAt(ctx, "k", t0)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.True(t, d.Shadowed)
	assert.Equal(t, time.Minute, d.RetryAfter)
}

// TestShadowEveryDenier: a lockout, the deny cache, FailClosed and the
// fallback's denial are all shadowed, their fields and errors kept;
// invalid input and a caller gone are not decisions, and stay denied.
func TestShadowEveryDenier(t *testing.T) {
	ctx := context.Background()
	t.Run("lockout-and-deny-cache", func(t *testing.T) {
		rec := &recorder{}
		p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second, Lockout: time.Minute}
		l, err := core.NewLimiter(newMemStore(t), p, core.WithShadow(), core.WithDenyCache(10), core.WithObserver(rec))
		require.NoError(t, err)
		_, err = l.AllowAt(ctx, "k", t0)
		require.NoError(t, err)
		d, err := l.AllowAt(ctx, "k", t0)
		require.NoError(t, err)
		assert.True(t, d.Allowed && d.Shadowed && d.LockedOut, "%+v", d)
		assert.Equal(t, time.Minute, d.RetryAfter)
		assert.Equal(t, core.OutcomeShadowDenied, rec.last(t).Outcome)
		d, err = l.AllowAt(ctx, "k", t0.Add(time.Second))
		require.NoError(t, err)
		assert.True(t, d.Allowed && d.Shadowed && d.LockedOut, "%+v", d)
		assert.Equal(t, core.SourceDenyCache, d.Source)
		assert.Equal(t, 59*time.Second, d.RetryAfter)
		assert.Equal(t, core.OutcomeShadowDenied, rec.last(t).Outcome)
	})
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	t.Run("fail-closed", func(t *testing.T) {
		s := &switchStore{}
		s.fail.Store(true)
		l, err := core.NewLimiter(s, p, core.WithShadow(), core.WithFailMode(core.FailClosed))
		require.NoError(t, err)
		d, err := l.AllowAt(ctx, "k", t0)
		require.ErrorIs(t, err, core.ErrStore)
		assert.True(t, d.Allowed && d.Shadowed, "%+v", d)
		assert.Equal(t, core.SourceFailMode, d.Source)
		assert.Equal(t, time.Second, d.RetryAfter)
	})
	t.Run("fallback-denies", func(t *testing.T) {
		s := &switchStore{}
		s.fail.Store(true)
		rec := &recorder{}
		fb := directStore{&fakeStore{answer: core.Decision{Limit: 10, RetryAfter: time.Second}}}
		l, err := core.NewLimiter(s, p, core.WithShadow(), core.WithFallback(fb), core.WithObserver(rec))
		require.NoError(t, err)
		d, err := l.AllowAt(ctx, "k", t0)
		require.ErrorIs(t, err, core.ErrStore)
		assert.True(t, d.Allowed && d.Shadowed, "%+v", d)
		assert.Equal(t, core.SourceFallback, d.Source)
		assert.Equal(t, core.OutcomeShadowDenied, rec.last(t).Outcome)
	})
	t.Run("fail-open-is-not-shadowed", func(t *testing.T) {
		s := &switchStore{}
		s.fail.Store(true)
		l, err := core.NewLimiter(s, p, core.WithShadow())
		require.NoError(t, err)
		d, err := l.AllowAt(ctx, "k", t0)
		require.ErrorIs(t, err, core.ErrStore)
		assert.True(t, d.Allowed)
		assert.False(t, d.Shadowed)
	})
	t.Run("invalid-and-canceled", func(t *testing.T) {
		rec := &recorder{}
		l, err := core.NewLimiter(newMemStore(t), p, core.WithShadow(), core.WithObserver(rec))
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "k", 0)
		require.ErrorIs(t, err, core.ErrInvalidCost)
		assert.False(t, d.Allowed)
		assert.False(t, d.Shadowed)
		assert.Equal(t, core.OutcomeInvalid, rec.last(t).Outcome)
		d, err = l.Allow(ctx, "")
		require.ErrorIs(t, err, core.ErrInvalidKey)
		assert.False(t, d.Allowed || d.Shadowed)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		d, err = l.Allow(canceled, "k")
		require.ErrorIs(t, err, core.ErrCanceled)
		assert.False(t, d.Allowed || d.Shadowed)
		assert.Equal(t, core.OutcomeCanceled, rec.last(t).Outcome)
	})
}

func TestReport(t *testing.T) {
	rec := &recorder{}
	p := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}
	l, err := core.NewLimiter(newMemStore(t), p, core.WithObserver(rec))
	require.NoError(t, err)

	require.NoError(t, l.Report("203.0.113.7", 3, core.OutcomeAllowListed))
	e := rec.last(t)
	assert.Equal(t, core.Event{Policy: e.Policy, Key: "203.0.113.7", Cost: 3, Outcome: core.OutcomeAllowListed,
		Decision: core.Decision{Allowed: true, Limit: 20, Policy: l.Policy()}, Binding: true}, e)
	assert.Equal(t, "api", e.LimitName())
	assert.True(t, e.Outcome.Admitted())
	assert.False(t, e.NearLimit(), "the allow list says nothing of the quota")

	long := string(make([]byte, limits.MaxKeyLen+1))
	require.NoError(t, l.Report(long, 1, core.OutcomeDenyListed))
	e = rec.last(t)
	assert.Equal(t, core.OutcomeDenyListed, e.Outcome)
	assert.False(t, e.Decision.Allowed)
	assert.Contains(t, e.Key, "sha256:", "the key as the store would see it")
	assert.False(t, e.Outcome.Admitted())

	n := rec.len()
	for _, o := range []core.Outcome{core.OutcomeAllowed, core.OutcomeDenied, core.OutcomeShadowDenied, core.OutcomeLockedOut, core.Outcome(200)} {
		assert.ErrorIs(t, l.Report("k", 1, o), core.ErrInvalidOption, "%v", o)
	}
	assert.ErrorIs(t, l.Report("", 1, core.OutcomeAllowListed), core.ErrInvalidKey)
	assert.ErrorIs(t, l.Report("k", 0, core.OutcomeAllowListed), core.ErrInvalidCost)
	assert.Equal(t, n, rec.len(), "nothing reported for bad arguments")

	// Without observers: nothing to do, and no allocation.
	quiet, err := core.NewLimiter(newMemStore(t), p)
	require.NoError(t, err)
	require.NoError(t, quiet.Report("k", 1, core.OutcomeAllowListed))
	assert.ErrorIs(t, quiet.Report("k", 1, core.OutcomeDenied), core.ErrInvalidOption)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = quiet.Report("203.0.113.7", 1, core.OutcomeDenyListed) }))
	var heard int
	counted, err := core.NewLimiter(newMemStore(t), p, core.WithObserver(core.ObserverFunc(func(core.Event) { heard++ })))
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = counted.Report("203.0.113.7", 1, core.OutcomeDenyListed) }),
		"an observed report allocates nothing either, for an observer that keeps nothing")
	assert.Positive(t, heard)
}
