package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// TestLockoutShadowAndLists: lockouts, shadow mode's would-be denials and
// the HTTP flow's allow and deny lists (Limiter.Observe) are counted under
// their own outcomes; none of them is near the limit.
func TestLockoutShadowAndLists(t *testing.T) {
	m, reg := newMetrics(t)
	s := newMemStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour,
		Lockout: time.Hour}
	login := newLimiter(t, s, p, m)
	for range 8 { // 5 admitted, the sixth starts a lockout, 2 during it
		_, err := login.AllowN(ctx, "alice", 1, t0)
		require.NoError(t, err)
	}
	require.NoError(t, login.Observe("203.0.113.7", 1, true))
	require.NoError(t, login.Observe("198.51.100.9", 1, false))
	require.NoError(t, login.Observe("198.51.100.9", 1, false))

	p = core.Policy{Name: "trial", Algorithm: core.TokenBucket, Limit: 2, Window: time.Hour}
	trial := newLimiter(t, s, p, m, core.WithShadow())
	for range 5 { // 2 admitted, 3 would have been denied
		d, err := trial.AllowN(ctx, "alice", 1, t0)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}

	assert.Equal(t, outcomes("allowed", 5, "locked_out", 3, "allow_listed", 1, "deny_listed", 2), decisions(t, reg, "login"))
	assert.Equal(t, outcomes("allowed", 2, "shadow_denied", 3), decisions(t, reg, "trial"))
	// Near the limit: the fifth login (0 of 5 left), the second trial (0
	// of 2); not the lockouts, lists or shadowed denials.
	assert.Equal(t, map[string]float64{"limit=login": 1, "limit=trial": 1}, series(t, reg, "ratelimit_near_limit_total"))
}
