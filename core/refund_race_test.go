package core_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestRefundRace: two Limiters (two app servers' worth of layered
// Limiters on one memory store) race AllowLayers at the store's clock and
// Refund a random part of each admission, dated with the time AllowLayers
// returned; what the store counts in every layer is then exactly what the
// admissions kept, for every algorithm (the buckets may show one unit
// more: the drain of the race, less than a unit, which refunds do not
// give back).
func TestRefundRace(t *testing.T) {
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			layers := []core.Policy{
				{Name: "global", Algorithm: alg, Limit: limits.MaxLogLimit, Window: limits.MaxWindow},
				{Name: "user", Algorithm: alg, Limit: limits.MaxLogLimit, Window: limits.MaxWindow},
			}
			store := newMemStore(t)
			var ls [2]*core.Limiter
			for i := range ls {
				l, err := core.NewLimiter(store, layers)
				require.NoError(t, err)
				ls[i] = l
			}
			var kept [2]atomic.Int64
			var wg sync.WaitGroup
			const goroutines, attempts = 64, 200
			for g := range goroutines {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					l := ls[g%2]
					for range attempts {
						checks := []core.Request{{Key: "g", Cost: 1 + rng.Int64N(8)}, {Key: "u", Cost: 1 + rng.Int64N(8)}}
						d, at, err := l.AllowLayers(context.Background(), time.Time{}, checks, nil)
						if !assert.NoError(t, err) || !assert.True(t, d.Allowed) || !assert.False(t, at.IsZero()) {
							return
						}
						back := make([]core.Request, len(checks)) // a layer with nothing back has no Key
						for i, c := range checks {
							r := rng.Int64N(c.Cost + 1)
							kept[i].Add(c.Cost - r)
							if r > 0 {
								back[i] = core.Request{Key: c.Key, Cost: r}
							}
						}
						if !assert.NoError(t, l.Refund(context.Background(), at, back)) {
							return
						}
					}
				})
			}
			wg.Wait()
			out := make([]core.Decision, 2)
			require.NoError(t, ls[0].Peek(context.Background(), time.Time{}, []core.Request{{Key: "g"}, {Key: "u"}}, out))
			slack := int64(0)
			if limits.IsBucket(alg) {
				slack = 1
			}
			for i, d := range out {
				used := d.Limit - d.Remaining
				assert.True(t, used >= kept[i].Load() && used <= kept[i].Load()+slack, "layer %s: the store counts %d, the admissions kept %d", layers[i].Name, used, kept[i].Load())
			}
		})
	}
}
