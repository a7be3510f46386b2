package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestPeekTellsTheNextDecision: on a layered Limiter with a plan from a
// PolicySource, a peek before each request tells what the request's own
// decision reports before it spends (Remaining plus the cost, the
// binding layer's denial alike), each layer under the policy in force, and
// spends nothing: a twin client making the same requests without peeks
// gets the same decisions.
func TestPeekTellsTheNextDecision(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			layers := []core.Policy{
				{Name: "global", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute},
				{Name: "user", Algorithm: alg, Limit: 3, Window: 10 * time.Second},
			}
			premium := sourceFunc(func(_ context.Context, key string, p core.Policy) (core.Policy, error) {
				if p.Name == "user" && key[:1] == "p" {
					p.Limit = 6
				}
				return p, nil
			})
			l, err := core.NewLimiter(newMemStore(t), layers, core.WithPolicySource(premium))
			require.NoError(t, err)
			checks := func(key string) []core.Request {
				return []core.Request{{Key: "g-" + key, Cost: 1}, {Key: key, Cost: 1}}
			}
			for _, who := range []string{"free", "premium"} {
				for i := range 10 {
					now := t0.Add(time.Duration(i) * 900 * time.Millisecond)
					peek := make([]core.Decision, 2)
					require.NoError(t, l.Peek(ctx, now, checks(who), peek))
					got := make([]core.Decision, 2)
					d, _, err := l.AllowLayers(ctx, now, checks(who), got)
					require.NoError(t, err)
					twin, _, err := l.AllowLayers(ctx, now, checks(who+"-twin"), nil)
					require.NoError(t, err)
					assert.Equal(t, d.Allowed, twin.Allowed, "%s request %d: a peek spent", who, i)
					assert.Equal(t, d.Remaining, twin.Remaining, "%s request %d: a peek spent", who, i)
					for j := range got {
						assert.Equal(t, got[j].Policy, peek[j].Policy, "%s request %d layer %d", who, i, j)
						assert.Equal(t, got[j].Limit, peek[j].Limit, "%s request %d layer %d", who, i, j)
						if d.Allowed {
							assert.Equal(t, got[j].Remaining+1, peek[j].Remaining, "%s request %d layer %d", who, i, j)
						} else if !got[j].Allowed {
							assert.Equal(t, got[j].Remaining, peek[j].Remaining, "%s request %d layer %d", who, i, j)
							assert.Equal(t, got[j].ResetAfter, peek[j].ResetAfter, "%s request %d layer %d", who, i, j)
							assert.Equal(t, got[j].RetryAfter, peek[j].RetryAfter, "%s request %d layer %d", who, i, j)
						}
						assert.Equal(t, got[j].Allowed, peek[j].Allowed, "%s request %d layer %d: a cost-1 request", who, i, j)
					}
				}
			}
			out := make([]core.Decision, 2)
			require.NoError(t, l.Peek(ctx, t0, []core.Request{{}, {Key: "premium"}}, out))
			assert.Equal(t, int64(6), out[1].Policy.Limit, "the plan in force")
			assert.Zero(t, out[0], "the layer not checked")
		})
	}
}

// TestPeekIsNotADecision: observers do not hear a peek, shadow mode does
// not change it, and it spends nothing after a thousand calls.
func TestPeekIsNotADecision(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 12, 30, 0, 0, time.UTC) // mid-window: the test is not about time
	heard := 0
	obs := limitertest.Observer(func(core.Event) { heard++ })
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(obs), core.WithShadow(), core.WithDenyCache(100))
	require.NoError(t, err)
	for range 3 {
		_, err := l.AllowN(ctx, "k", 1, now)
		require.NoError(t, err)
	}
	heard = 0
	out := make([]core.Decision, 1)
	for range 1000 {
		require.NoError(t, l.Peek(ctx, now, []core.Request{{Key: "k"}}, out))
	}
	assert.Zero(t, heard, "observers heard peeks")
	assert.False(t, out[0].Allowed, "the quota is spent: a peek tells the truth in shadow mode")
	assert.False(t, out[0].Shadowed)
	assert.Equal(t, int64(0), out[0].Remaining)
	require.NoError(t, l.Peek(ctx, now, []core.Request{{Key: "fresh"}}, out))
	assert.True(t, out[0].Allowed)
	assert.Equal(t, int64(2), out[0].Remaining)
	for range 1000 {
		require.NoError(t, l.Peek(ctx, now, []core.Request{{Key: "fresh"}}, out))
	}
	d, err := l.AllowN(ctx, "fresh", 1, now)
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Remaining, "1,000 peeks spent nothing")
}

// TestPeekErrors: bad input wraps ErrInvalidOption (a key the Limiter
// would hash is peeked hashed, as it is decided); a failing store, an
// open breaker, a failing PolicySource and an ended ctx are Peek's error,
// never a made-up quota.
func TestPeekErrors(t *testing.T) {
	ctx := context.Background()
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 5, Window: time.Second}
	two := []core.Policy{limitertest.Named(p, "a", 0), limitertest.Named(p, "b", 0)}
	l, err := core.NewLimiter(newMemStore(t), two)
	require.NoError(t, err)
	out := make([]core.Decision, 2)
	assert.ErrorIs(t, l.Peek(ctx, time.Time{}, []core.Request{{Key: "k"}, {Key: "k"}, {Key: "k"}}, make([]core.Decision, 3)),
		core.ErrInvalidOption, "more Requests than layers")
	assert.ErrorIs(t, l.Peek(ctx, time.Time{}, []core.Request{{Key: "k"}, {Key: "k"}}, out[:1]), core.ErrInvalidOption, "out too short")
	odd := "{user} with spaces"
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // a bucket refills: time stands still
	_, err = l.AllowN(ctx, odd, 2, now)
	require.NoError(t, err)
	require.NoError(t, l.Peek(ctx, now, []core.Request{{Key: odd}}, out[:1]))
	assert.Equal(t, int64(3), out[0].Remaining, "a hashed key is peeked as it was decided")

	down := &flakyStore{Store: newMemStore(t), fail: func(int64) bool { return true }}
	l, err = core.NewLimiter(down, []core.Policy{p}, core.WithCircuitBreaker(3, time.Hour))
	require.NoError(t, err)
	err = l.Peek(ctx, time.Time{}, []core.Request{{Key: "k"}}, out)
	assert.ErrorIs(t, err, errFlap)
	for range 3 {
		_, _ = l.AllowN(ctx, "k", 1, time.Time{}) // open the breaker
	}
	calls := down.calls.Load()
	err = l.Peek(ctx, time.Time{}, []core.Request{{Key: "k"}}, out)
	assert.ErrorIs(t, err, limits.ErrCircuitOpen)
	assert.Equal(t, calls, down.calls.Load(), "an open breaker is not asked")

	failing := sourceFunc(func(context.Context, string, core.Policy) (core.Policy, error) {
		return core.Policy{}, errors.New("plans unavailable")
	})
	l, err = core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithPolicySource(failing))
	require.NoError(t, err)
	assert.ErrorContains(t, l.Peek(ctx, time.Time{}, []core.Request{{Key: "k"}}, out), "plans unavailable")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, l.Peek(canceled, time.Time{}, []core.Request{{Key: "k"}}, out), context.Canceled)
}

// TestPeekCallerLeftDuringTheRead: a caller that disconnects while the
// store reads gets an error wrapping context.Canceled, not a store
// failure.
func TestPeekCallerLeftDuringTheRead(t *testing.T) {
	s := &cancelingStore{}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	err = l.Peek(context.WithValue(ctx, cancelFuncKey{}, cancel), time.Time{}, []core.Request{{Key: "k"}}, make([]core.Decision, 1))
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, limits.ErrStore)
	assert.EqualValues(t, 1, s.calls.Load())
}
