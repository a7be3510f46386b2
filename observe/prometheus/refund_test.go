package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
)

// TestRefundOfAnObservedAdmission is the settling the docs describe, as a
// user writes it on a Limiter of one policy with the Prometheus exporter:
// reserve the most the work may cost with AllowLayers, then Refund what
// it did not use, dated with the time AllowLayers returned. (With an
// observer, that time used to be zero, and Refund refused it.)
func TestRefundOfAnObservedAdmission(t *testing.T) {
	store, err := memstore.New()
	require.NoError(t, err)
	defer store.Close()
	metrics, err := promlimit.New()
	require.NoError(t, err)
	prometheus.NewRegistry().MustRegister(metrics)
	l, err := core.NewLimiter(store, []core.Policy{{Name: "search", Algorithm: core.SlidingWindowLog, Limit: 10, Window: time.Minute}},
		core.WithObserver(metrics))
	require.NoError(t, err)

	ctx := context.Background()
	reserve := []core.Request{{Key: "203.0.113.7", Cost: 5}}
	d, at, err := l.AllowLayers(ctx, time.Time{}, reserve, nil)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, int64(5), d.Remaining)
	require.False(t, at.IsZero(), "the time the store admitted the request at")

	require.NoError(t, l.Refund(ctx, at, []core.Request{{Key: "203.0.113.7", Cost: 3}}), "the work cost 2 of the 5 reserved")
	out := make([]core.Decision, 1)
	require.NoError(t, l.Peek(ctx, time.Time{}, reserve, out))
	assert.Equal(t, int64(8), out[0].Remaining, "3 given back")
}
