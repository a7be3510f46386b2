package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/core"
)

// The measures of a report, on series made by hand.
func TestExcessAndUtilization(t *testing.T) {
	fixed := core.Policy{Algorithm: core.FixedWindow, Limit: 10, Window: 5 * time.Millisecond}
	perMs := []int64{4, 4, 0, 0, 3 /* 11 */, 2, 2, 2, 2, 2 /* 10 */, 9}
	assert.Equal(t, int64(1), excess(fixed, perMs), "a window 1 above its limit")
	assert.InDelta(t, 21.0/20, utilization(fixed, perMs), 1e-9, "whole windows only")

	// 2 a ms, a burst of 3: 5 in the first ms is 3 + 2, no excess; 7
	// in the next two ms, after 4 in the first, is 1 beyond 3 + 2*3.
	bucket := core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: 5 * time.Millisecond, Burst: 3}
	assert.Equal(t, int64(0), excess(bucket, []int64{5, 2, 2}))
	assert.Equal(t, int64(1), excess(bucket, []int64{4, 3, 3}))
	assert.Equal(t, int64(1), excess(bucket, []int64{0, 0, 5, 2, 0, 0, 6, 0}), "the 6 at 6 ms: 1 beyond 3 + 2")
}
