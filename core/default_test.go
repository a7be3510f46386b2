package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// TestDefaultAlgorithm: a policy without an Algorithm is a sliding window
// counter, written out by NewLimiter for Policies, decisions and the store.
func TestDefaultAlgorithm(t *testing.T) {
	ctx := context.Background()
	plain := core.Policy{Limit: 10, Window: time.Minute}
	counter := plain
	counter.Algorithm = core.SlidingWindowCounter

	s := &fakeStore{answer: core.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	l, err := core.NewLimiter(s, []core.Policy{plain})
	require.NoError(t, err)
	want := counter
	want.Name = "sliding_window_counter-10-per-1m0s"
	assert.Equal(t, []core.Policy{want}, l.Policies(), "Policies")
	d, err := l.AllowN(ctx, "k", 1, t0)
	require.NoError(t, err)
	assert.Equal(t, want, d.Policy, "the decision's policy")
	require.Len(t, s.reqs, 1)
	assert.Equal(t, want, s.reqs[0].Policy, "the store's policy")

	// It decides as the counter does, to the millisecond: across a
	// window's edge too, where a fixed window would admit 10 more.
	byDefault, err := core.NewLimiter(newMemStore(t), []core.Policy{plain})
	require.NoError(t, err)
	explicit, err := core.NewLimiter(newMemStore(t), []core.Policy{counter})
	require.NoError(t, err)
	for i, at := range []time.Duration{0, 30 * time.Second, 59 * time.Second, 59 * time.Second, 61 * time.Second, 75 * time.Second, 100 * time.Second, 125 * time.Second} {
		for range 4 {
			got, err := byDefault.AllowN(ctx, "k", 1, t0.Add(at))
			require.NoError(t, err)
			exp, err := explicit.AllowN(ctx, "k", 1, t0.Add(at))
			require.NoError(t, err)
			assert.Equal(t, exp, got, "request at %v (step %d)", at, i)
		}
	}
	d, err = byDefault.AllowN(ctx, "other", 10, t0.Add(59*time.Second))
	require.NoError(t, err)
	require.True(t, d.Allowed, "a whole quota at the end of a window")
	d, err = byDefault.AllowN(ctx, "other", 1, t0.Add(61*time.Second))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "no second quota just after the window's edge")

	// Layers: each empty Algorithm is filled in, the others kept.
	l, err = core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "a", Limit: 5, Window: time.Second},
		{Name: "b", Algorithm: core.TokenBucket, Limit: 5, Window: time.Second, Burst: 7},
	})
	require.NoError(t, err)
	ps := l.Policies()
	assert.Equal(t, core.SlidingWindowCounter, ps[0].Algorithm, "layer a")
	assert.Equal(t, core.TokenBucket, ps[1].Algorithm, "layer b")
}

// TestUnknownAlgorithmNamesTheValidOnes: NewLimiter's error lists the
// algorithms, and says what empty means.
func TestUnknownAlgorithmNamesTheValidOnes(t *testing.T) {
	_, err := core.NewLimiter(newMemStore(t), []core.Policy{{Algorithm: "gcra", Limit: 10, Window: time.Second}})
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.EqualError(t, err, `ratelimit: invalid argument: policy: unknown algorithm "gcra" `+
		`(one of fixed_window, sliding_window_log, sliding_window_counter, token_bucket, leaky_bucket; empty means sliding_window_counter)`)
}
