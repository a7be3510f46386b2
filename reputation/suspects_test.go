package reputation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// TestSuspectsBounded: a flood of distinct clients entering a band that
// scales fills the snapshot to maxSuspects and no further; a client
// already in it copies nothing at its next signals; once the flood has
// decayed, a prune (at most once per pruneEvery) makes room again.
// Adjust scales the clients in the snapshot, and returns the policy of
// any other as it is, without reading its score: one past the bound
// keeps its limits, though its score is in the band.
func TestSuspectsBounded(t *testing.T) {
	tr, err := New(Config{Bands: []Band{{Name: "suspicious", Above: 2, Scale: 0.5}}, HalfLife: time.Minute})
	require.NoError(t, err)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.now = func() time.Time { return now }
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	scaled := func(key string) bool {
		t.Helper()
		q, err := tr.Adjust(ctx, key, p)
		require.NoError(t, err)
		if q == p {
			return false
		}
		assert.Equal(t, int64(50), q.Limit, "%s: halved", key)
		return true
	}
	for i := range 2 * maxSuspects {
		tr.signal(ctx, fmt.Sprintf("k%d", i), Denied, 3)
	}
	m := tr.suspects.Load()
	require.NotNil(t, m)
	assert.Len(t, *m, maxSuspects, "bounded")
	tr.signal(ctx, "k0", Denied, 1)
	assert.Same(t, m, tr.suspects.Load(), "a client in the snapshot copies nothing")
	assert.True(t, scaled("k0"))
	past := fmt.Sprintf("k%d", 2*maxSuspects-1)
	assert.Greater(t, tr.scores.Get(past, now), 2.0, "in the band by its score")
	assert.False(t, scaled(past), "past the bound: not scaled")
	assert.False(t, scaled("nobody"))

	now = now.Add(10 * time.Minute) // the flood decays: 3 / 2^10
	tr.signal(ctx, "late", Denied, 3)
	m = tr.suspects.Load()
	assert.Len(t, *m, 1, "pruned: only the client above the band now")
	assert.True(t, scaled("late"))
	assert.False(t, scaled("k0"), "decayed, pruned: whole again")
	tr.signal(ctx, "later", Denied, 3)
	assert.Len(t, *tr.suspects.Load(), 2, "room again")
}

// BenchmarkSignalFull is a signal of a new client above a band that
// scales while the snapshot of suspects is full and was just pruned: it
// copies nothing.
func BenchmarkSignalFull(b *testing.B) {
	tr, err := New(Config{Bands: []Band{{Name: "suspicious", Above: 2, Scale: 0.5}}})
	require.NoError(b, err)
	ctx := context.Background()
	for i := range maxSuspects {
		tr.signal(ctx, fmt.Sprintf("k%d", i), Denied, 3)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("new%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.signal(ctx, keys[i%len(keys)], Denied, 3)
		i++
	}
}
