package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestRefundGivesBack: on a layered Limiter with a plan from a
// PolicySource, what AllowLayers took and Refund gave back, dated with
// the time AllowLayers returned, is as if it had never been taken, in
// every algorithm; a refund is no decision (observers do not hear it),
// and it clears a remembered denial.
func TestRefundGivesBack(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			layers := []core.Policy{
				{Name: "global", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute},
				{Name: "user", Algorithm: alg, Limit: 10, Window: 10 * time.Second},
			}
			premium := sourceFunc(func(_ context.Context, key string, p core.Policy) (core.Policy, error) {
				if p.Name == "user" && key == "premium" {
					p.Limit = 20
				}
				return p, nil
			})
			heard := 0
			obs := limitertest.Observer(func(core.Event) { heard++ })
			l, err := core.NewLimiter(newMemStore(t), layers, core.WithPolicySource(premium), core.WithObserver(obs))
			require.NoError(t, err)
			for _, who := range []string{"free", "premium"} {
				checks := []core.Request{{Key: who, Cost: 8}, {Key: who, Cost: 8}}
				d, at, err := l.AllowLayers(ctx, t0, checks, nil)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				require.True(t, at.Equal(t0), "AllowLayers returns the time the store decided at")
				heard = 0
				require.NoError(t, l.Refund(ctx, at, []core.Request{{Key: who, Cost: 5}, {Key: who, Cost: 5}}))
				assert.Zero(t, heard, "observers heard a refund")
				out := make([]core.Decision, 2)
				require.NoError(t, l.Peek(ctx, t0, checks, out))
				assert.Equal(t, int64(1000-3), out[0].Remaining, who)
				assert.Equal(t, out[1].Limit-3, out[1].Remaining, "%s: 8 taken, 5 given back", who)
			}
		})
	}

	p := core.Policy{Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour}
	now := t0.Add(30 * time.Minute)
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithDenyCache(100))
	require.NoError(t, err)
	for range 2 {
		_, err = l.AllowN(ctx, "k", 1, now)
		require.NoError(t, err)
	}
	at := now // memstore decided at the explicit now
	d, err := l.AllowN(ctx, "k", 1, now)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	d, err = l.AllowN(ctx, "k", 1, now)
	require.NoError(t, err)
	require.Equal(t, core.SourceDenyCache, d.Source, "the denial is remembered")
	require.NoError(t, l.Refund(ctx, at, []core.Request{{Key: "k", Cost: 1}}))
	d, err = l.AllowN(ctx, "k", 1, now)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "after a refund, the remembered denial no longer holds: %+v", d)
}

// TestRefundErrors: bad input wraps ErrInvalidOption, and a failing
// store, an open breaker and an ended ctx are Refund's error.
func TestRefundErrors(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 5, Window: time.Second}
	two := []core.Policy{limitertest.Named(p, "a", 0), limitertest.Named(p, "b", 0)}
	l, err := core.NewLimiter(newMemStore(t), two)
	require.NoError(t, err)
	for name, reqs := range map[string][]core.Request{
		"more than the layers": {{}, {}, {Key: "k", Cost: 1}},
		"cost 0":               {{Key: "k", Cost: 0}},
		"cost negative":        {{Key: "k", Cost: -1}},
		"cost above burst":     {{Key: "k", Cost: 6}},
		"a later layer's cost": {{Key: "k", Cost: 1}, {Key: "k", Cost: 6}},
	} {
		assert.ErrorIs(t, l.Refund(ctx, now, reqs), core.ErrInvalidOption, name)
	}
	assert.ErrorIs(t, l.Refund(ctx, time.Time{}, []core.Request{{Key: "k", Cost: 1}}), core.ErrInvalidOption, "no admission time")
	assert.NoError(t, l.Refund(ctx, now, nil), "nothing to refund")
	assert.NoError(t, l.Refund(ctx, now, []core.Request{{Cost: 1}, {Cost: 2}}), "no layer given back")

	down := &flakyStore{Store: newMemStore(t), fail: func(int64) bool { return true }}
	l, err = core.NewLimiter(down, []core.Policy{p}, core.WithCircuitBreaker(3, time.Hour))
	require.NoError(t, err)
	assert.ErrorIs(t, l.Refund(ctx, now, []core.Request{{Key: "k", Cost: 1}}), errFlap)
	for range 3 {
		_, _ = l.AllowN(ctx, "k", 1, time.Time{}) // open the breaker
	}
	calls := down.calls.Load()
	assert.ErrorIs(t, l.Refund(ctx, now, []core.Request{{Key: "k", Cost: 1}}), limits.ErrCircuitOpen)
	assert.Equal(t, calls, down.calls.Load(), "an open breaker is not asked")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, l.Refund(canceled, now, []core.Request{{Key: "k", Cost: 1}}), context.Canceled)
}

// TestAllowLayersReturnsTheTime: AllowLayers returns the time the store
// decided at on a single-layer Limiter with observers too (the one
// decision sequence has no shortcut that loses it), so that its admission
// can be refunded, and the zero time for a decision that was not the
// store's.
func TestAllowLayersReturnsTheTime(t *testing.T) {
	ctx := context.Background()
	p := core.Policy{Algorithm: core.SlidingWindowLog, Limit: 3, Window: time.Minute}
	obs := limitertest.Observer(func(core.Event) {})
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(obs))
	require.NoError(t, err)
	checks := []core.Request{{Key: "k", Cost: 2}}
	d, at, err := l.AllowLayers(ctx, time.Time{}, checks, nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.False(t, at.IsZero())
	assert.WithinDuration(t, time.Now(), at, time.Minute)
	require.NoError(t, l.Refund(ctx, at, []core.Request{{Key: "k", Cost: 2}}))
	out := make([]core.Decision, 1)
	require.NoError(t, l.Peek(ctx, time.Time{}, checks, out))
	assert.Equal(t, int64(3), out[0].Remaining, "the sliding log's entry was given back, by its time")

	l, err = core.NewLimiter(downStore{newMemStore(t)}, []core.Policy{p})
	require.NoError(t, err)
	d, at, err = l.AllowLayers(ctx, time.Time{}, checks, make([]core.Decision, 1))
	require.NoError(t, err)
	assert.True(t, d.Allowed, "fails open")
	assert.True(t, at.IsZero(), "nothing the store took")
}

// downStore fails every call.
type downStore struct{ core.Store }

func (downStore) Take(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	return time.Time{}, errFlap
}
