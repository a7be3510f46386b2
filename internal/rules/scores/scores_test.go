package scores

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestDecay: a score halves every half-life, signals add up, a clock
// stepping back undoes no decay, and a score that has decayed below
// Forgotten reads 0, on a virtual clock. (rediswatch's TestScoresMatchMemory
// holds its script to the same.)
func TestDecay(t *testing.T) {
	ctx := context.Background()
	s, err := NewMemory(time.Minute, 10_000)
	require.NoError(t, err)
	v, err := s.Add(ctx, "a", 8, t0)
	require.NoError(t, err)
	assert.Equal(t, 8.0, v)
	assert.Equal(t, 8.0, s.Get("a", t0))
	assert.InEpsilon(t, 4.0, s.Get("a", t0.Add(time.Minute)), 1e-12)
	assert.InEpsilon(t, 2.0, s.Get("a", t0.Add(2*time.Minute)), 1e-12)
	v, err = s.Add(ctx, "a", 1, t0.Add(time.Minute))
	require.NoError(t, err)
	assert.InEpsilon(t, 5.0, v, 1e-12, "decayed to 4, plus 1")
	v, err = s.Add(ctx, "a", 1, t0) // a minute back
	require.NoError(t, err)
	assert.InEpsilon(t, 6.0, v, 1e-12, "added at the last signal's time, not before it")
	assert.Zero(t, s.Get("a", t0.Add(20*time.Minute)), "6 / 2^19 is forgotten")
	assert.Zero(t, s.Get("never", t0))
	_, err = s.Add(ctx, "a", -1, t0)
	assert.Error(t, err, "a negative weight")
	_, err = s.Add(ctx, "a", math.NaN(), t0)
	assert.Error(t, err, "NaN")
	_, err = s.Add(ctx, "a", MaxWeight+1, t0)
	assert.Error(t, err, "above MaxWeight")
}

// TestMemoryBounded: a flood of distinct keys keeps the store within its
// bound and evicts its own kind, not the client that scored high.
func TestMemoryBounded(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemory(time.Hour, 1600)
	require.NoError(t, err)
	_, err = m.Add(ctx, "scanner", 50, t0)
	require.NoError(t, err)
	for i := range 100_000 {
		_, err := m.Add(ctx, fmt.Sprintf("flood-%d", i), 1, t0)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, m.Len(), 1600)
	assert.Equal(t, 50.0, m.Get("scanner", t0), "the high score survives the flood")
	_, err = NewMemory(time.Hour, 0)
	assert.Error(t, err)
	_, err = NewMemory(0, 10)
	assert.Error(t, err)
}

func BenchmarkMemoryGet(b *testing.B) {
	m, err := NewMemory(time.Minute, 10_000)
	require.NoError(b, err)
	_, err = m.Add(context.Background(), "k", 3, t0)
	require.NoError(b, err)
	now := t0.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if m.Get("k", now) == 0 {
			b.Fatal("no score")
		}
	}
}
