package httplimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestFlowWritesTheStoresTime: the flow writes X-RateLimit-Reset from the
// time the store says it decided at (the time Limiter.AllowLayers returns),
// not from a reading of its own clock, on admissions and denials.
func TestFlowWritesTheStoresTime(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 500_000_000, time.UTC)
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 2, Window: time.Minute}
	f, err := httplimit.New(&limitertest.Timed{Store: memStore(t), At: at}, []httplimit.Layer{{Policy: p}}, httplimit.WithHeaders(headers.Config{XRateLimit: true, Draft6: true, RetryAfter: true}))
	require.NoError(t, err)
	for i, allowed := range []bool{true, true, false} {
		w := newResponse()
		assert.Equal(t, allowed, handle(f, newRequest(), w), "request %d", i)
		layers, err := headers.Parse(w.header)
		require.NoError(t, err, "request %d", i)
		require.NotEmpty(t, layers, "request %d", i)
		d := layers[0]
		reset, err := strconv.ParseInt(w.header.Get("X-RateLimit-Reset"), 10, 64)
		require.NoError(t, err, "request %d: %v", i, w.header)
		// The bucket refills a token every 30 s: the reset is the store's
		// time plus the ResetAfter the headers tell, rounded up.
		assert.InDelta(t, at.Add(d.ResetAfter).Unix(), reset, 1, "request %d", i)
		assert.Greater(t, reset, time.Now().Add(365*24*time.Hour).Unix(), "request %d: the store's time, years ahead", i)
	}
}
