package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestLayeredLimiter: a layered Limiter has the series of each layer;
// each request counts under every layer that applied to it, with that
// layer's own decision: a layer that would have admitted a request
// another layer denied counts it allowed (it took nothing).
func TestLayeredLimiter(t *testing.T) {
	m, reg := newMetrics(t)
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "wide", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute},
		{Name: "narrow", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute},
	}, core.WithObserver(m))
	require.NoError(t, err)
	ctx := context.Background()
	wide := []core.Request{{Key: "k", Cost: 1}}
	both := []core.Request{{Key: "k", Cost: 1}, {Key: "k", Cost: 1}}
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l, ctx, wide, time.Time{}, &v))
	for range 3 {
		require.NoError(t, limitertest.AllowLayers(l, ctx, both, time.Time{}, &v))
	}
	assert.False(t, v.Allowed)
	assert.Equal(t, outcomes("allowed", 4), decisions(t, reg, "wide"), "every request the wide layer applied to, the denied one included")
	assert.Equal(t, outcomes("allowed", 2, "denied", 1), decisions(t, reg, "narrow"))
	assert.Equal(t, "healthy", health(t, reg, "wide"))
	assert.Equal(t, "healthy", health(t, reg, "narrow"))

	// A layer name cannot be bound twice.
	_, err = core.NewLimiter(newMemStore(t), []core.Policy{{Name: "narrow", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}}, core.WithObserver(m))
	require.Error(t, err)
}
