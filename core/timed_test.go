package core_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// countingTake is a memory store behind a wrapper that overrides Take to
// count its calls, and is promoted the memory store's TakeTimed and
// TimedStore: the Limiter must not bypass its Take.
type countingTake struct {
	*memstore.Store
	calls *atomic.Int64
}

func (s countingTake) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, now, reqs, out)
}

// TestAllowNTimed: over the memory store, AllowNTimed returns the time the
// store read, to the microsecond, with its monotonic reading, and the
// decision AllowN would have made.
func TestAllowNTimed(t *testing.T) {
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 3, Window: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p})
	require.NoError(t, err)
	twin, err := core.NewLimiter(newMemStore(t), []core.Policy{p})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 {
		// The store's reading is truncated to the microsecond.
		before := time.Now().Add(-time.Microsecond)
		d, at, err := limitertest.AllowNTimed(l, ctx, "203.0.113.7", 1)
		after := time.Now()
		require.NoError(t, err)
		assert.NotEqual(t, at, at.Round(0), "request %d: a monotonic reading", i)
		assert.False(t, at.Before(before), "request %d: decided at %v, before %v", i, at, before)
		assert.False(t, at.After(after), "request %d: decided at %v, after %v", i, at, after)
		want, err := twin.AllowN(ctx, "203.0.113.7", 1, time.Time{})
		require.NoError(t, err)
		// The twin decided a little later: only the durations differ.
		d.ResetAfter, want.ResetAfter = 0, 0
		d.RetryAfter, want.RetryAfter = 0, 0
		assert.Equal(t, want, d, "request %d", i)
	}
}

// TestAllowNTimedZero: the time is the store's whenever the store
// decided, whatever the Limiter has (a wrapper that overrides Take, an
// observer, shadow mode, a key the Limiter digests), and zero, the
// decision AllowN's, when it did not: invalid input, a client that has
// left, a store that fails.
func TestAllowNTimedZero(t *testing.T) {
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}
	ctx := context.Background()
	var calls atomic.Int64
	wrapped, err := core.NewLimiter(countingTake{Store: newMemStore(t), calls: &calls}, []core.Policy{p})
	require.NoError(t, err)
	for i := range 3 {
		d, at, err := limitertest.AllowNTimed(wrapped, ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, at.IsZero(), "a wrapper's time: the inner store's, through the wrapper's Take")
		assert.Equal(t, i < 2, d.Allowed, "request %d", i)
	}
	assert.EqualValues(t, 3, calls.Load(), "the wrapper's Take, every time")

	for name, opts := range map[string][]core.Option{
		"observer": {core.WithObserver(limitertest.Observer(func(core.Event) {}))},
		"shadow":   {core.WithShadow()},
	} {
		l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, opts...)
		require.NoError(t, err)
		d, at, err := limitertest.AllowNTimed(l, ctx, "k", 1)
		require.NoError(t, err, name)
		assert.True(t, d.Allowed, name)
		assert.False(t, at.IsZero(), "%s: the store decided, and said when", name)
	}

	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p})
	require.NoError(t, err)
	_, at, err := limitertest.AllowNTimed(l, ctx, "k", 0)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.True(t, at.IsZero(), "invalid cost")
	_, at, err = limitertest.AllowNTimed(l, ctx, "k", 3)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.True(t, at.IsZero(), "cost over the limit")

	// A client that has left: no decision, no time, the store not asked.
	left, cancel := context.WithCancel(ctx)
	cancel()
	var leftCalls atomic.Int64
	counted, err := core.NewLimiter(countingTake{Store: newMemStore(t), calls: &leftCalls}, []core.Policy{p})
	require.NoError(t, err)
	for name, lim := range map[string]*core.Limiter{"timed": l, "wrapped": counted} {
		d, at, err := limitertest.AllowNTimed(lim, left, "k", 1)
		require.ErrorIs(t, err, context.Canceled, name)
		assert.False(t, d.Allowed, name)
		assert.True(t, at.IsZero(), name)
	}
	assert.Zero(t, leftCalls.Load(), "a client that left: the store not asked")

	// A key that is digested (too long, or a byte outside printable
	// ASCII): AllowN's decision, under the digest, and the store's time.
	for _, key := range []string{strings.Repeat("k", limits.MaxKeyLen+1), "k\x00{x}"} {
		twin, err := core.NewLimiter(newMemStore(t), []core.Policy{p})
		require.NoError(t, err)
		for i := range 3 {
			d, at, err := limitertest.AllowNTimed(l, ctx, key, 1)
			require.NoError(t, err)
			assert.False(t, at.IsZero(), "%q: a digested key's time", key)
			want, err := twin.AllowN(ctx, key, 1, time.Time{})
			require.NoError(t, err)
			d.ResetAfter, want.ResetAfter = 0, 0
			d.RetryAfter, want.RetryAfter = 0, 0
			assert.Equal(t, want, d, "%q, request %d", key, i)
		}
	}

	down := errors.New("down")
	failing, err := core.NewLimiter(&limitertest.Timed{Store: newMemStore(t), Err: down}, []core.Policy{p})
	require.NoError(t, err)
	d, at, err := limitertest.AllowNTimed(failing, ctx, "k", 1)
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrStore)
	require.ErrorIs(t, d.Err, down)
	assert.True(t, d.Allowed, "failed open")
	assert.Equal(t, core.SourceFailMode, d.Source)
	assert.True(t, at.IsZero(), "a failed store's time")
}

// TestAllowNTimedOwnType: a TimedStore of its own type is asked for the
// time, and its time is handed on as it is.
func TestAllowNTimedOwnType(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	l, err := core.NewLimiter(&limitertest.Timed{Store: newMemStore(t), At: at}, []core.Policy{{Name: "p", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}})
	require.NoError(t, err)
	d, got, err := limitertest.AllowNTimed(l, context.Background(), "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, core.SourceStore, d.Source)
	assert.Equal(t, "p", d.Policy.Name)
	assert.True(t, at.Equal(got), "got %v", got)
}
