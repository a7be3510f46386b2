package limits_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestDerive: a scale rounds down, to at least 1; the clamp only lowers,
// to the nearest value a valid policy has; what no clamp makes valid
// without loosening (a limit below 1, a window out of range) is left as
// it is, for Validate to refuse.
func TestDerive(t *testing.T) {
	day := 24 * time.Hour
	for name, c := range map[string]struct {
		algo                 string
		limit                int64
		window               time.Duration
		burst                int64
		f                    float64
		wantLimit, wantBurst int64
	}{
		"the issue's bucket halved: 400 takes 400 days": {limits.TokenBucket, 3, day, 800, 0.5, 1, 366},
		"a leaky bucket alike":                          {limits.LeakyBucket, 3, day, 800, 0.5, 1, 366},
		"a burst the rate refills is kept":              {limits.TokenBucket, 3, day, 800, 0.9, 2, 720},
		"scaled to nothing: 1":                          {limits.FixedWindow, 5, limits.MaxWindow, 0, 1e-6, 1, 0},
		"rounded down, not up":                          {limits.FixedWindow, 3, time.Second, 0, 0.5, 1, 0},
		"a decimal scale's float error":                 {limits.FixedWindow, 1000, time.Second, 0, 0.003, 3, 0},
		"a log above its most":                          {limits.SlidingWindowLog, 50_000, time.Minute, 0, 10, limits.MaxLogLimit, 0},
		"a limit above the most, unscaled":              {limits.FixedWindow, 4 * limits.MaxLimit, time.Second, 0, 1, limits.MaxLimit, 0},
		"no scale, nothing to clamp":                    {limits.TokenBucket, 100, time.Hour, 10_000, 0, 100, 10_000},
		"a limit below 1 is left for Validate":          {limits.FixedWindow, 0, time.Second, 0, 1, 0, 0},
		"a window out of range is left for Validate":    {limits.TokenBucket, 1, 2 * limits.MaxWindow, 10, 1, 1, 10},
		"a NaN scale scales nothing":                    {limits.TokenBucket, 3, day, 800, math.NaN(), 3, 800},
	} {
		l, b := limits.Derive(c.algo, c.limit, c.window, c.burst, c.f)
		assert.Equal(t, c.wantLimit, l, "%s: limit", name)
		assert.Equal(t, c.wantBurst, b, "%s: burst", name)
		if c.burst > 0 && b > 0 && c.f <= 1 {
			assert.LessOrEqual(t, b, c.burst, "%s: never above the burst it derives from", name)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		allowed bool
		after   time.Duration
		want    int64
	}{
		{true, 0, 0},
		{true, time.Hour, 0},
		{false, 0, 1},
		{false, -time.Second, 1},
		{false, time.Millisecond, 1},
		{false, time.Second, 1},
		{false, 1001 * time.Millisecond, 2},
		{false, 2 * time.Second, 2},
		{false, limits.MaxWindow, 366 * 24 * 3600},
		{false, time.Duration(1<<63 - 1), 9223372037},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, limits.RetryAfterSeconds(tt.allowed, tt.after), "allowed %v, RetryAfter %v", tt.allowed, tt.after)
	}
}
