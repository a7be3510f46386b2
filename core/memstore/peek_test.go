package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestPeekFloodCreatesNothing: a flood of peeks on 20,000 distinct keys,
// of one request and of several, into a store full of clients at their limits,
// creates no state and evicts none: the clients stay at their limits.
func TestPeekFloodCreatesNothing(t *testing.T) {
	ctx := context.Background()
	s := mustNew(t, memstore.WithShards(1), memstore.WithMaxKeys(200))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var ps []core.Policy
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		ps = append(ps, core.Policy{Name: "p-" + string(alg), Algorithm: alg, Limit: 2, Window: time.Hour, Burst: 2})
	}
	for i := range 40 {
		for _, p := range ps {
			for range 2 {
				d, _, err := memstore.TakeOne(s, ctx, now, core.Request{Key: "client-" + strconv.Itoa(i), Policy: p, Cost: 1})
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
		}
	}
	require.Equal(t, 200, s.Len())
	reqs := make([]core.Request, len(ps))
	out := make([]core.Decision, len(ps))
	for i := range 20000 {
		key := "flood-" + strconv.Itoa(i)
		d, err := memstore.PeekOne(s, ctx, now, core.Request{Key: key, Policy: ps[i%len(ps)]})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		for j, p := range ps {
			reqs[j] = core.Request{Key: key, Policy: p, Cost: 1}
		}
		err = s.Peek(ctx, now, reqs, out)
		require.NoError(t, err)
	}
	assert.Equal(t, 200, s.Len(), "peeks created or evicted state")
	for i := range 40 {
		for _, p := range ps {
			d, _, err := memstore.TakeOne(s, ctx, now, core.Request{Key: "client-" + strconv.Itoa(i), Policy: p, Cost: 1})
			require.NoError(t, err)
			require.False(t, d.Allowed, "client-%d under %s was forgotten", i, p.Name)
		}
	}
}

// TestPeekOfExpiredState: a state past its expiry peeks as none, and the
// peek leaves it for the next take to clear (a sliding log keeps its
// entries).
func TestPeekOfExpiredState(t *testing.T) {
	ctx := context.Background()
	s := mustNew(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Algorithm: alg, Limit: 3, Window: time.Second, Burst: 3}
		req := core.Request{Key: "k-" + string(alg), Policy: p, Cost: 3}
		_, _, err := memstore.TakeOne(s, ctx, now, req)
		require.NoError(t, err)
		later := now.Add(time.Hour)
		d, err := memstore.PeekOne(s, ctx, later, req)
		require.NoError(t, err)
		assert.Equal(t, true, d.Allowed, string(alg))
		assert.Equal(t, int64(3), d.Remaining, string(alg))
		assert.Zero(t, d.ResetAfter, string(alg))
		req.Cost = 3
		d, _, err = memstore.TakeOne(s, ctx, later, req)
		require.NoError(t, err)
		assert.True(t, d.Allowed, string(alg))
	}
}

// BenchmarkPeek is a peek beside the decision it tells of (BenchmarkTake,
// BenchmarkTakeAll): one key, and four layers, on the store's clock.
func BenchmarkPeek(b *testing.B) {
	ctx := context.Background()
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		for _, name := range []string{"take", "peek"} {
			b.Run(fmt.Sprintf("%s/%s", alg, name), func(b *testing.B) {
				s := mustNew(b)
				req := core.Request{Key: "203.0.113.7", Policy: benchPolicy(alg), Cost: 1}
				_, _, _ = memstore.TakeOne(s, ctx, time.Time{}, req)
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if name == "take" {
						_, _, err = memstore.TakeOne(s, ctx, time.Time{}, req)
					} else {
						_, err = memstore.PeekOne(s, ctx, time.Time{}, req)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b)
			})
		}
	}
	for _, name := range []string{"take", "peek"} {
		b.Run("4-layers/"+name, func(b *testing.B) {
			s := mustNew(b)
			reqs := benchLayers(4, 0)
			out := make([]core.Decision, 4)
			_, _ = s.Take(ctx, time.Time{}, reqs, out)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if name == "take" {
					_, err = s.Take(ctx, time.Time{}, reqs, out)
				} else {
					err = s.Peek(ctx, time.Time{}, reqs, out)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPeekOfUnknownKeysAllocatesNothing: a flood of peeks on keys the store
// has never seen costs no memory, not even transiently.
func TestPeekOfUnknownKeysAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	s := mustNew(t)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "new-" + strconv.Itoa(i)
	}
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Algorithm: alg, Limit: 5, Window: time.Minute}
		i := 0
		allocs := testing.AllocsPerRun(500, func() {
			_, _ = memstore.PeekOne(s, ctx, time.Time{}, core.Request{Key: keys[i%len(keys)], Policy: p})
			i++
		})
		assert.Zero(t, allocs, string(alg))
	}
	assert.Zero(t, s.Len())
}
