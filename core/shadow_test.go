package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestShadowDecidesAndRecordsButNeverDenies: in shadow mode the store
// counts exactly as it would, denials pass marked Shadowed with the
// denial's fields, and the observers hear shadow_denied.
func TestShadowDecidesAndRecordsButNeverDenies(t *testing.T) {
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}
	s := newMemStore(t)
	rec := &recorder{}
	shadow, err := core.NewLimiter(s, []core.Policy{p}, core.WithShadow(), core.WithObserver(rec))
	require.NoError(t, err)
	enforcing, err := core.NewLimiter(s, []core.Policy{p}) // same store, same name: same counts
	require.NoError(t, err)
	assert.True(t, shadow.Shadow())
	assert.False(t, enforcing.Shadow())
	ctx := context.Background()

	for i := range 2 {
		d, err := shadow.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.False(t, d.Shadowed, "request %d: admitted, not shadowed", i)
		assert.Equal(t, outcome.Allowed, outcomeOf(rec.last(t)))
	}
	d, err := shadow.AllowN(ctx, "k", 1, t0.Add(10*time.Second))
	require.NoError(t, err)
	assert.Equal(t, core.Decision{Allowed: true, Shadowed: true, Limit: 2, ResetAfter: 50 * time.Second,
		RetryAfter: 50 * time.Second, Policy: shadow.Policies()[0]}, d)
	e := rec.last(t)
	assert.Equal(t, outcome.ShadowDenied, outcome.Of(&e.Decision))
	assert.True(t, outcome.Of(&e.Decision).Admitted())
	assert.False(t, outcome.NearLimit(&e.Decision), "past the limit, not near it")
	assert.Equal(t, d, e.Decision)

	// The shadow limiter's admissions were recorded: the enforcing one
	// denies.
	d, err = enforcing.AllowN(ctx, "k", 1, t0.Add(10*time.Second))
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.False(t, d.Shadowed)
}

// TestShadowWithoutObservers: the path without observers shades too.
func TestShadowWithoutObservers(t *testing.T) {
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 1, Window: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithShadow())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.AllowN(ctx, "k", 1, t0)
	require.NoError(t, err)
	d, err := l.AllowN(ctx, "k", 1, t0)
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
		l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithShadow(), core.WithDenyCache(10), core.WithObserver(rec))
		require.NoError(t, err)
		_, err = l.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		assert.True(t, d.Allowed && d.Shadowed && d.LockedOut, "%+v", d)
		assert.Equal(t, time.Minute, d.RetryAfter)
		assert.Equal(t, outcome.ShadowDenied, outcomeOf(rec.last(t)))
		d, err = l.AllowN(ctx, "k", 1, t0.Add(time.Second))
		require.NoError(t, err)
		assert.True(t, d.Allowed && d.Shadowed && d.LockedOut, "%+v", d)
		assert.Equal(t, core.SourceDenyCache, d.Source)
		assert.Equal(t, 59*time.Second, d.RetryAfter)
		assert.Equal(t, outcome.ShadowDenied, outcomeOf(rec.last(t)))
	})
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	t.Run("fail-closed", func(t *testing.T) {
		s := &switchStore{}
		s.fail.Store(true)
		l, err := core.NewLimiter(s, []core.Policy{limitertest.Named(p, "", time.Second)}, core.WithShadow())
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrStore)
		assert.True(t, d.Allowed && d.Shadowed, "%+v", d)
		assert.Equal(t, core.SourceFailMode, d.Source)
		assert.Equal(t, time.Second, d.RetryAfter)
	})
	t.Run("fallback-denies", func(t *testing.T) {
		s := &switchStore{}
		s.fail.Store(true)
		rec := &recorder{}
		fb := directStore{&fakeStore{answer: core.Decision{Limit: 10, RetryAfter: time.Second}}}
		l, err := core.NewLimiter(s, []core.Policy{p}, core.WithShadow(), core.WithFallback(fb), core.WithObserver(rec))
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrStore)
		assert.True(t, d.Allowed && d.Shadowed, "%+v", d)
		assert.Equal(t, core.SourceFallback, d.Source)
		assert.Equal(t, outcome.ShadowDenied, outcomeOf(rec.last(t)))
	})
	t.Run("fail-open-is-not-shadowed", func(t *testing.T) {
		s := &switchStore{}
		s.fail.Store(true)
		l, err := core.NewLimiter(s, []core.Policy{p}, core.WithShadow())
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "k", 1, t0)
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrStore)
		assert.True(t, d.Allowed)
		assert.False(t, d.Shadowed)
	})
	t.Run("invalid-and-canceled", func(t *testing.T) {
		rec := &recorder{}
		l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithShadow(), core.WithObserver(rec))
		require.NoError(t, err)
		d, err := l.AllowN(ctx, "k", 0, time.Time{})
		require.ErrorIs(t, err, core.ErrInvalidOption)
		assert.False(t, d.Allowed)
		assert.False(t, d.Shadowed)
		assert.Equal(t, outcome.Invalid, outcomeOf(rec.last(t)))
		d, err = l.AllowN(ctx, "", 1, time.Time{})
		require.ErrorIs(t, err, core.ErrInvalidOption)
		assert.False(t, d.Allowed || d.Shadowed)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		d, err = l.AllowN(canceled, "k", 1, time.Time{})
		require.ErrorIs(t, err, context.Canceled)
		assert.False(t, d.Allowed || d.Shadowed)
		assert.Equal(t, outcome.Canceled, outcomeOf(rec.last(t)))
	})
}

func TestObserve(t *testing.T) {
	rec := &recorder{}
	p := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(rec))
	require.NoError(t, err)

	require.NoError(t, l.Observe("203.0.113.7", 3, true))
	e := rec.last(t)
	assert.Equal(t, core.Event{Key: "203.0.113.7", Cost: 3,
		Decision: core.Decision{Allowed: true, Source: core.SourceList, Limit: 20, Policy: l.Policies()[0]}, Binding: true}, e)
	assert.Equal(t, outcome.AllowListed, outcome.Of(&e.Decision))
	assert.Equal(t, "api", e.Policy.Name)
	assert.True(t, outcome.Of(&e.Decision).Admitted())
	assert.False(t, outcome.NearLimit(&e.Decision), "the allow list says nothing of the quota")

	long := string(make([]byte, limits.MaxKeyLen+1))
	require.NoError(t, l.Observe(long, 1, false))
	e = rec.last(t)
	assert.Equal(t, outcome.DenyListed, outcome.Of(&e.Decision))
	assert.False(t, e.Decision.Allowed)
	assert.Contains(t, e.Key, "sha256:", "the key as the store would see it")
	assert.False(t, outcome.Of(&e.Decision).Admitted())

	n := rec.len()
	assert.ErrorIs(t, l.Observe("", 1, true), core.ErrInvalidOption)
	assert.ErrorIs(t, l.Observe("k", 0, true), core.ErrInvalidOption)
	assert.Equal(t, n, rec.len(), "nothing reported for bad arguments")

	// Without observers: nothing to do, and no allocation.
	quiet, err := core.NewLimiter(newMemStore(t), []core.Policy{p})
	require.NoError(t, err)
	require.NoError(t, quiet.Observe("k", 1, true))
	assert.ErrorIs(t, quiet.Observe("", 1, false), core.ErrInvalidOption)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = quiet.Observe("203.0.113.7", 1, false) }))
	var heard int
	counted, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(limitertest.Observer(func(core.Event) { heard++ })))
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = counted.Observe("203.0.113.7", 1, false) }),
		"an observed report allocates nothing either, for an observer that keeps nothing")
	assert.Positive(t, heard)
}

// TestShadowLayersEveryDenial: in shadow mode, a layered request that
// two layers would deny is admitted, and neither layer's decision, nor
// what the observers hear of it, says denied: both are shadowed.
func TestShadowLayersEveryDenial(t *testing.T) {
	rec := &recorder{}
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{limitertest.Named(p, "a"), limitertest.Named(p, "b")},
		core.WithShadow(), core.WithObserver(rec))
	require.NoError(t, err)
	ctx := context.Background()
	checks := []core.Request{{Key: "k", Cost: 1}, {Key: "k", Cost: 1}}
	out := make([]core.Decision, 2)
	d, _, err := l.AllowLayers(ctx, t0, checks, out)
	require.NoError(t, err)
	require.True(t, d.Allowed && !d.Shadowed)
	n := rec.len()

	d, _, err = l.AllowLayers(ctx, t0, checks, out)
	require.NoError(t, err)
	assert.True(t, d.Allowed && d.Shadowed, "%+v", d)
	for i, ld := range out {
		assert.True(t, ld.Allowed && ld.Shadowed, "layer %d: %+v", i, ld)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.events[n:], 2, "one Event per layer")
	for _, e := range rec.events[n:] {
		assert.Equal(t, outcome.ShadowDenied, outcomeOf(e), "layer %s", e.Policy.Name)
	}
}
