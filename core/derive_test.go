package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/gridtest"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// planScaler is a plan as a user writes it, a function that
// scales the limit and burst of the clients put on it by f, truncating,
// at least 1, with no clamp of its own: the Limiter's clamp keeps it
// valid.
func planScaler(_ *testing.T, f float64) gridtest.Scaler {
	var on sync.Map
	plan := sourceFunc(func(_ context.Context, key string, p core.Policy) (core.Policy, error) {
		if _, ok := on.Load(key); ok {
			p.Limit = max(1, int64(float64(p.Limit)*f))
			if p.Burst > 0 {
				p.Burst = max(1, int64(float64(p.Burst)*f))
			}
		}
		return p, nil
	})
	return gridtest.Scaler{Adjust: plan, Scale: func(_ *testing.T, key string) { on.Store(key, true) }}
}

// TestScaledSourcesNeverLooserOnMemstore: a source of the user's that
// scales by every factor of gridtest.Scales, on every algorithm and the
// extreme policies: no decision falls to the fail mode (which admits),
// and none admits more than the scaled policy allows. Before the
// Limiter clamped every source's result, 0.5 of a bucket of 3 a day with
// a burst of 800 was invalid, and admitted everything.
func TestScaledSourcesNeverLooserOnMemstore(t *testing.T) {
	gridtest.RunScales(t, gridtest.ScaleConfig{Store: newMemStore(t), NewScaler: planScaler})
}

// TestScaledSourcesNeverLooserOnRedis is the grid over a real
// redis-server: every case but those whose usage Redis cannot drain
// (gridtest.Config.MaxDrain).
func TestScaledSourcesNeverLooserOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(), redisstore.WithPrefix("grid:"+t.Name()+":"), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	gridtest.RunScales(t, gridtest.ScaleConfig{Store: store, NewScaler: planScaler, MaxDrain: time.Duration(1<<53) * time.Microsecond})
}

// TestSourceResultClamped: what a source returns that no valid policy
// keeps, but a tighter one does, is clamped down to the nearest valid
// value and decided by the store; a deliberate raise (a premium plan)
// that is valid is decided as returned; a result with no valid policy
// at least as tight (a limit below 1, a window out of range) is the
// source's error, decided by the fail mode as before.
func TestSourceResultClamped(t *testing.T) {
	day := 24 * time.Hour
	cases := map[string]struct {
		layer  core.Policy
		change func(p *core.Policy)
		want   core.Policy // zero: decided by the fail mode
	}{
		"a burst the halved rate cannot refill": {
			core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 3, Window: day, Burst: 800},
			func(p *core.Policy) { p.Limit, p.Burst = 1, 400 },
			core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 1, Window: day, Burst: 366},
		},
		"a premium plan, ten times": {
			core.Policy{Name: "api", Algorithm: core.LeakyBucket, Limit: 3, Window: day, Burst: 800},
			func(p *core.Policy) { p.Limit, p.Burst = 30, 8000 },
			core.Policy{Name: "api", Algorithm: core.LeakyBucket, Limit: 30, Window: day, Burst: 8000},
		},
		"a log raised past its most": {
			core.Policy{Name: "api", Algorithm: core.SlidingWindowLog, Limit: 50_000, Window: time.Minute},
			func(p *core.Policy) { p.Limit *= 10 },
			core.Policy{Name: "api", Algorithm: core.SlidingWindowLog, Limit: limits.MaxLogLimit, Window: time.Minute},
		},
		"a limit past MaxLimit": {
			core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: limits.MaxLimit / 2, Window: time.Second},
			func(p *core.Policy) { p.Limit *= 4 },
			core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Second},
		},
		"a limit of 0": {
			core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 5, Window: time.Second},
			func(p *core.Policy) { p.Limit = 0 },
			core.Policy{},
		},
		"a window past MaxWindow": {
			core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 5, Window: time.Hour, Burst: 10},
			func(p *core.Policy) { p.Window = 2 * limits.MaxWindow },
			core.Policy{},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			src := sourceFunc(func(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
				c.change(&p)
				return p, nil
			})
			l, err := core.NewLimiter(newMemStore(t), []core.Policy{c.layer}, core.WithPolicySource(src))
			require.NoError(t, err)
			d, err := l.AllowN(context.Background(), "k", 1, layerT0)
			require.NoError(t, err)
			if c.want == (core.Policy{}) {
				assert.ErrorIs(t, d.Err, limits.ErrPolicy)
				assert.Equal(t, core.SourceFailMode, d.Source)
				return
			}
			require.NoError(t, d.Err)
			assert.Equal(t, core.SourceStore, d.Source)
			assert.Equal(t, c.want, d.Policy)
			assert.True(t, d.Allowed)
		})
	}
}

// BenchmarkScaledSource is a decision through a source that halves a
// bucket's policy, the clamp of its result included (the burst above
// the limit takes the clamp's division).
func BenchmarkScaledSource(b *testing.B) {
	half := sourceFunc(func(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
		p.Limit, p.Burst = p.Limit/2, p.Burst/2
		return p, nil
	})
	l, err := core.NewLimiter(newMemStore(b), []core.Policy{{Name: "api", Algorithm: core.TokenBucket, Limit: 100_000_000_000, Window: time.Second, Burst: limits.MaxLimit}},
		core.WithPolicySource(half))
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.AllowN(ctx, "k", 1, layerT0); d.Source != core.SourceStore {
			b.Fatal(d.Err)
		}
	}
}
