package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestCostOverThePolicyInForceIsADenial: a request whose cost fits a
// policy configured for it (the layer's, or its plan's) but not the one in
// force (a policy source shrank it under load, or a smaller plan) is
// denied, with RetryAfter the layer's Window and no error, and takes
// nothing from any layer; a cost beyond every configured policy is still
// ErrInvalidOption.
func TestCostOverThePolicyInForceIsADenial(t *testing.T) {
	ctx := context.Background()
	src := &scale{}
	plans := &planned{layer: "user"}
	layers := []core.Policy{
		{Name: "global", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute},
		{Name: "user", Algorithm: core.TokenBucket, Limit: 20, Window: time.Minute},
	}
	l, err := core.NewLimiter(newMemStore(t), layers, core.WithPolicySource(plans), core.WithPolicySource(src))
	require.NoError(t, err)
	ask := func(cost, plan int64) (limitertest.Verdict, error) {
		plans.set(plan)
		var v limitertest.Verdict
		err := limitertest.AllowLayers(l, ctx, []core.Request{{Key: "api", Cost: cost}, {Key: "user:1", Cost: cost}}, layerT0, &v)
		return v, err
	}

	v, err := ask(5, 0)
	require.NoError(t, err)
	require.True(t, v.Allowed)
	require.Equal(t, int64(15), v.Decisions[1].Remaining)

	src.set(0.1, "") // shedding load: the user layer holds 2
	v, err = ask(5, 0)
	require.NoError(t, err, "a denial, not an error")
	assert.False(t, v.Allowed)
	assert.Equal(t, 1, v.Binding, "the user layer denied")
	assert.Equal(t, int64(2), v.Limit)
	assert.Equal(t, time.Minute, v.RetryAfter)
	assert.Zero(t, v.Remaining)
	assert.Equal(t, core.SourceStore, v.Source)
	require.Len(t, v.Decisions, 2)
	assert.True(t, v.Decisions[0].Allowed)
	assert.Zero(t, v.Decisions[0].Remaining, "the store was not asked: the global layer says nothing left")

	_, err = ask(201, 0)
	require.ErrorIs(t, err, core.ErrInvalidOption, "beyond the user layer's own 20: the caller's mistake")
	src.set(0, "")

	// Nothing was taken by the denial: global and user say what they said.
	v, err = ask(1, 0)
	require.NoError(t, err)
	require.True(t, v.Allowed)
	assert.Equal(t, int64(1000-5-1), v.Decisions[0].Remaining)
	assert.Equal(t, int64(20-5-1), v.Decisions[1].Remaining)

	// A plan (the first source): its capacity counts as configured,
	// before the next source shrinks it; a cost beyond both the plan's
	// and the layer's is an error.
	src.set(0.1, "")
	v, err = ask(100, 500)
	require.NoError(t, err)
	assert.False(t, v.Allowed, "100 fits the premium plan's 500, not its 50 under load")
	_, err = ask(600, 500)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	src.set(0, "")
	v, err = ask(100, 500)
	require.NoError(t, err)
	assert.True(t, v.Allowed, "100 fits the premium plan, above the layer's own 20")
	v, err = ask(5, 3)
	require.NoError(t, err)
	assert.False(t, v.Allowed, "5 fits the layer's own 20, not the small plan's 3")
	assert.Equal(t, int64(3), v.Limit)

	// A single Limiter with a policy source, likewise.
	single, err := core.NewLimiter(newMemStore(t), []core.Policy{{Name: "api", Algorithm: core.FixedWindow, Limit: 20, Window: time.Minute}},
		core.WithPolicySource(src))

	require.NoError(t, err)
	src.set(0.1, "")
	d, err := single.AllowN(ctx, "k", 5, layerT0)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(2), d.Limit)
	assert.Equal(t, time.Minute, d.RetryAfter)
	_, err = single.AllowN(ctx, "k", 21, layerT0)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	src.set(0, "")
	d, err = single.AllowN(ctx, "k", 20, layerT0)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the denial took nothing")
}

// planned is a PolicySource of plans: the layer named layer gets the
// plan's Limit, when one is set.
type planned struct {
	mu    sync.Mutex
	layer string
	limit int64
}

func (s *planned) Adjust(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit != 0 && p.Name == s.layer {
		p.Limit = s.limit
	}
	return p, nil
}

func (s *planned) set(limit int64) {
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
}
