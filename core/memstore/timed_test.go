package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestTakeTimed: Take returns the time it decided at: its clock's reading,
// with a monotonic reading, or an explicit now as it is; on an error, the
// zero time.
func TestTakeTimed(t *testing.T) {
	s, twin := newStore(t), newStore(t)
	ctx := context.Background()
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Name: "p", Algorithm: alg, Limit: 3, Window: time.Minute}
		for i := range 5 {
			req := core.Request{Key: "k", Policy: p, Cost: 1}
			now := t0.Add(time.Duration(i) * time.Second)
			d, at, err := memstore.TakeOne(s, ctx, now, req)
			require.NoError(t, err)
			assert.Equal(t, now, at, "%s %d: an explicit time, as it is", alg, i)
			want, _, err := memstore.TakeOne(twin, ctx, now, req)
			require.NoError(t, err)
			assert.Equal(t, want, d, "%s %d", alg, i)
		}
		req := core.Request{Key: "clock", Policy: p, Cost: 1}
		before := time.Now().Add(-time.Microsecond) // the reading is truncated to the µs
		d, at, err := memstore.TakeOne(s, ctx, time.Time{}, req)
		after := time.Now()
		require.NoError(t, err)
		assert.True(t, d.Allowed, "%s", alg)
		assert.NotEqual(t, at, at.Round(0), "%s: a monotonic reading", alg)
		assert.False(t, at.Before(before), "%s: decided at %v, before %v", alg, at, before)
		assert.False(t, at.After(after), "%s: decided at %v, after %v", alg, at, after)
		assert.WithinDuration(t, time.Now(), at, time.Second, "%s: the wall time", alg)
	}
	_, at, err := memstore.TakeOne(s, ctx, time.Time{}, core.Request{Key: "", Policy: core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}, Cost: 1})
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.True(t, at.IsZero(), "an error's time")
	_, at, err = memstore.TakeOne(s, ctx, time.Time{}, core.Request{Key: "k", Policy: core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}, Cost: 2})
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.True(t, at.IsZero(), "an error's time")
}

// BenchmarkTakeTimed is BenchmarkTake's hot key, reading the decision time.
func BenchmarkTakeTimed(b *testing.B) {
	s := newStore(b)
	req := core.Request{Key: "203.0.113.7", Policy: core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Hour}, Cost: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := memstore.TakeOne(s, ctx, time.Time{}, req); err != nil {
			b.Fatal(err)
		}
	}
}
