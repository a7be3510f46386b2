package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/core/storetest"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

var multiT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLayersExactness(t *testing.T) {
	storetest.RunConcurrent(t, []core.Store{newStore(t)}, 8)
}

func TestLayersExactnessFewShards(t *testing.T) {
	// Two shards: the layers' keys share shards for some requests and not
	// for others.
	storetest.RunConcurrent(t, []core.Store{newStore(t, memstore.WithShards(2))}, 8)
}

// fourLayers is a request of cost 1 on four layers, one of each of four
// algorithms, for the keys keys[i].
func fourLayers(keys [4]string, limits [4]int64, now time.Time) []core.Request {
	algs := [4]core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.TokenBucket, core.SlidingWindowCounter}
	reqs := make([]core.Request, 4)
	for i := range reqs {
		p := core.Policy{Name: fmt.Sprintf("layer%d", i), Algorithm: algs[i], Limit: limits[i], Window: time.Hour}
		reqs[i] = core.Request{Key: keys[i], Policy: p, Cost: 1}
	}
	return reqs
}

func TestTakeAllDeniedStoresNoNewKey(t *testing.T) {
	// A denied TakeAll creates no state for the keys it saw first: the
	// Store holds as many keys as before.
	s := newStore(t)
	ctx := context.Background()
	tight := core.Request{Key: "k", Policy: core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}, Cost: 1}
	_, _, err := memstore.TakeOne(s, ctx, multiT0, tight)
	require.NoError(t, err)
	require.Equal(t, 1, s.Len())
	reqs := fourLayers([4]string{"a", "b", "c", "d"}, [4]int64{10, 10, 10, 10}, multiT0)
	reqs = append(reqs, tight)
	out := make([]core.Decision, len(reqs))
	require.NoError(t, errOf(s.Take(ctx, multiT0, reqs, out)))
	for i := range 4 {
		assert.True(t, out[i].Allowed, "layer %d admits alone", i)
		assert.Equal(t, int64(9), out[i].Remaining, "layer %d: what it would have left", i)
	}
	assert.False(t, out[4].Allowed)
	assert.Equal(t, 1, s.Len(), "the denied request stored none of its new keys")

	// Admitted, it stores them all.
	require.NoError(t, errOf(s.Take(ctx, multiT0, reqs[:4], out[:4])))
	assert.Equal(t, 5, s.Len())
}

func TestTakeAllExpiredStateRolledBack(t *testing.T) {
	// A state that had expired, cleared for a request that is then rolled
	// back, decides like no state.
	s := newStore(t)
	ctx := context.Background()
	logp := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: 3, Window: time.Minute}
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	for range 3 {
		d, _, err := memstore.TakeOne(s, ctx, multiT0, core.Request{Key: "k", Policy: logp, Cost: 1})
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	_, _, err := memstore.TakeOne(s, ctx, multiT0, core.Request{Key: "k", Policy: tight, Cost: 1})
	require.NoError(t, err)
	later := multiT0.Add(2 * time.Minute) // the log has expired; tight has not
	reqs := []core.Request{
		{Key: "k", Policy: logp, Cost: 2},
		{Key: "k", Policy: tight, Cost: 1},
	}
	out := make([]core.Decision, 2)
	require.NoError(t, errOf(s.Take(ctx, later, reqs, out)))
	require.True(t, out[0].Allowed)
	require.False(t, out[1].Allowed)
	d, _, err := memstore.TakeOne(s, ctx, later, core.Request{Key: "k", Policy: logp, Cost: 3})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the whole log is free: the rolled-back request took nothing")
	assert.Equal(t, int64(0), d.Remaining)
}

// TestTakeAllWithoutStore: a Store not built by New refuses TakeAll.
func TestTakeAllWithoutStore(t *testing.T) {
	reqs := fourLayers([4]string{"a", "b", "c", "d"}, [4]int64{10, 10, 10, 10}, multiT0)
	require.ErrorIs(t, errOf((&memstore.Store{}).Take(context.Background(), time.Time{}, reqs[:1], make([]core.Decision, 1))), errNoStoreOf(t))
}

// errNoStoreOf returns the error of a Store not built with New.
func errNoStoreOf(t *testing.T) error {
	_, _, err := memstore.TakeOne((&memstore.Store{}), context.Background(), time.Time{}, core.Request{Key: "k", Policy: core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}, Cost: 1})
	require.Error(t, err)
	return err
}

func TestTakeAllAllocs(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	keys := [4]string{"global", "user-42", "GET:/items", "203.0.113.7"}
	admit := fourLayers(keys, [4]int64{limits.MaxLogLimit, limits.MaxLogLimit, 1e9, 1e9}, multiT0)
	deny := append(fourLayers(keys, [4]int64{limits.MaxLogLimit, limits.MaxLogLimit, 1e9, 1e9}, multiT0),
		core.Request{Key: "full", Policy: core.Policy{Name: "full", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}, Cost: 1})
	out := make([]core.Decision, len(deny))
	require.NoError(t, errOf(s.Take(ctx, multiT0, deny, out))) // creates every key; "full" is now full
	require.True(t, out[4].Allowed)
	var i int64
	allocs := testing.AllocsPerRun(200, func() {
		i++
		if _, err := s.Take(ctx, multiT0.Add(time.Duration(i)*time.Millisecond), admit, out[:4]); err != nil || !out[0].Allowed {
			t.Fatalf("TakeAll: %v, %+v", err, out[0])
		}
	})
	// (The sliding log's array grows now and then as it logs: amortized,
	// a small fraction of an allocation per call, which AllocsPerRun's
	// integer average rounds away.)
	assert.Zero(t, allocs, "allocations per admitted TakeAll")
	allocs = testing.AllocsPerRun(200, func() {
		i++
		if _, err := s.Take(ctx, multiT0.Add(time.Duration(i)*time.Millisecond), deny, out); err != nil || out[4].Allowed {
			t.Fatalf("TakeAll: %v, %+v", err, out[4])
		}
	})
	assert.Zero(t, allocs, "allocations per rolled-back TakeAll")
}

func TestTakeAllConcurrentLayered(t *testing.T) {
	// Several Limiters over one store, goroutines hammering four layers at
	// one instant, keys that share shards (2 shards) and that do not (64):
	// no layer key admits beyond its limit, and the layer with room counts
	// exactly the admitted requests.
	for _, shards := range []int{2, 64} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			s := newStore(t, memstore.WithShards(shards))
			layers := []core.Policy{
				{Name: "global", Algorithm: core.FixedWindow, Limit: 400, Window: time.Hour},
				{Name: "user", Algorithm: core.SlidingWindowLog, Limit: 60, Window: time.Hour},
				{Name: "room", Algorithm: core.TokenBucket, Limit: 1_000_000, Window: time.Hour},
				{Name: "ip", Algorithm: core.SlidingWindowCounter, Limit: 35, Window: time.Hour},
			}
			const users, ips = 8, 12
			limiters := make([]*core.Limiter, 3)
			for i := range limiters {
				l, err := core.NewLimiter(s, layers)
				require.NoError(t, err)
				limiters[i] = l
			}
			var (
				userN [users]atomic.Int64
				ipN   [ips]atomic.Int64
				total atomic.Int64
				wg    sync.WaitGroup
			)
			start := make(chan struct{})
			const goroutines, attempts = 12, 150
			for g := range goroutines {
				l := limiters[g%len(limiters)]
				wg.Go(func() {
					<-start
					var v limitertest.Verdict
					for a := range attempts {
						u, ip := (g+a)%users, (g*7+a*5)%ips
						checks := []core.Request{
							{Key: "all", Cost: 1},
							{Key: fmt.Sprintf("u%d", u), Cost: 1},
							{Key: "all", Cost: 1},
							{Key: fmt.Sprintf("ip%d", ip), Cost: 1},
						}
						if err := limitertest.AllowLayers(l, context.Background(), checks, multiT0, &v); err != nil {
							t.Error(err)
							return
						}
						if v.Allowed {
							total.Add(1)
							userN[u].Add(1)
							ipN[ip].Add(1)
						}
					}
				})
			}
			// Plain Takes on the same keys meanwhile, on another policy.
			wg.Go(func() {
				<-start
				for a := range attempts {
					_, _, err := memstore.TakeOne(s, context.Background(), multiT0, core.Request{Key: fmt.Sprintf("u%d", a%users), Policy: core.Policy{Name: "other", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}, Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
			close(start)
			wg.Wait()

			got := total.Load()
			assert.LessOrEqual(t, got, int64(400))
			assert.Greater(t, got, int64(0))
			for u := range userN {
				assert.LessOrEqual(t, userN[u].Load(), int64(60), "user %d", u)
			}
			for ip := range ipN {
				assert.LessOrEqual(t, ipN[ip].Load(), int64(35), "ip %d", ip)
			}
			// The bound is the ips' (12*35 = 420) and the global 400:
			// every attempt that fitted every layer passed.
			var v limitertest.Verdict
			require.NoError(t, limitertest.AllowLayers(limiters[0], context.Background(), []core.Request{{}, {}, {Key: "all", Cost: 1}}, multiT0, &v))
			require.True(t, v.Allowed)
			assert.Equal(t, 1_000_000-got-1, v.Remaining, "the layer with room was charged only for admitted requests")
			require.NoError(t, limitertest.AllowLayers(limiters[0], context.Background(), []core.Request{{Key: "all", Cost: 1}}, multiT0, &v))
			if got < 400 {
				assert.Equal(t, 400-got-1, v.Remaining, "the global layer was charged only for admitted requests")
			}
		})
	}
}
