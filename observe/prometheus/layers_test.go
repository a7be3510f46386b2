package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// TestLayeredLimiter: a layered Limiter has the series of each layer;
// each request counts once, under its binding layer.
func TestLayeredLimiter(t *testing.T) {
	m, reg := newMetrics(t)
	l, err := core.NewLayered(newMemStore(t), []core.Layer{
		{Name: "wide", Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}},
		{Name: "narrow", Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}},
	}, core.WithObserver(m))
	require.NoError(t, err)
	ctx := context.Background()
	wide := []core.Check{{Layer: 0, Key: "k", Cost: 1}}
	both := []core.Check{{Layer: 0, Key: "k", Cost: 1}, {Layer: 1, Key: "k", Cost: 1}}
	var v core.Verdict
	require.NoError(t, l.AllowLayers(ctx, wide, &v))
	for range 3 {
		require.NoError(t, l.AllowLayers(ctx, both, &v))
	}
	assert.False(t, v.Allowed)
	assert.Equal(t, outcomes("allowed", 1), decisions(t, reg, "wide"))
	assert.Equal(t, outcomes("allowed", 2, "denied", 1), decisions(t, reg, "narrow"))
	assert.Equal(t, "healthy", health(t, reg, "wide"))
	assert.Equal(t, "healthy", health(t, reg, "narrow"))

	// A layer name cannot be bound twice.
	_, err = core.NewLimiter(newMemStore(t), core.Policy{Name: "narrow", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}, core.WithObserver(m))
	require.Error(t, err)
}
