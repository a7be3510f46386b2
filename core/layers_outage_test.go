package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestLayeredRedisOutage: a layered Limiter over a frozen, then a dead,
// Redis decides every request within its timeout, by its FailMode or its
// fallback store, with an error wrapping ErrStore.
func TestLayeredRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a redis-server of its own to freeze and kill")
	}
	client := redis.NewClient(srv.Options()) // a default client: it ignores deadlines on a frozen server
	t.Cleanup(func() { _ = client.Close() })
	const timeout = 50 * time.Millisecond
	store, err := redisstore.New(client, redisstore.WithTimeout(timeout))
	require.NoError(t, err)
	open, err := core.NewLimiter(store, fourLayers(), core.WithCircuitBreaker(0, time.Second))
	require.NoError(t, err)
	shut := fourLayers()
	for i := range shut {
		shut[i].FailClosed = time.Second
	}
	closed, err := core.NewLimiter(store, shut, core.WithCircuitBreaker(0, time.Second))
	require.NoError(t, err)
	fb := newMemStore(t)
	fallback, err := core.NewLimiter(store, fourLayers(), core.WithFallback(fb), core.WithCircuitBreaker(0, time.Second))
	require.NoError(t, err)
	guarded := fourLayers()
	guarded[2].FailClosed = time.Second // the login guard stays shut in an outage
	mixed, err := core.NewLimiter(store, guarded, core.WithCircuitBreaker(0, time.Second))
	require.NoError(t, err)
	checks := []core.Request{{Key: "api", Cost: 1}, {}, {Key: "ip:1", Cost: 1}, {Key: "ip:1", Cost: 1}}
	ctx := context.Background()

	// Healthy: one layered decision, from Redis, through a store and a
	// Limiter of their own over the same client, with a generous timeout: the
	// short one under test is for the outage, and a healthy round trip on
	// a busy machine (this first one dials and loads the script) may
	// outlast it.
	healthyStore, err := redisstore.New(client, redisstore.WithTimeout(10*time.Second))
	require.NoError(t, err)
	healthy, err := core.NewLimiter(healthyStore, fourLayers())
	require.NoError(t, err)
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(healthy, ctx, checks, time.Time{}, &v))
	require.True(t, v.Allowed)
	assert.Equal(t, core.SourceStore, v.Source)

	for _, phase := range []struct {
		name    string
		breakIt func()
	}{{"frozen", srv.Freeze}, {"dead", func() { srv.Thaw(); srv.Kill() }}} {
		t.Run(phase.name, func(t *testing.T) {
			phase.breakIt()
			for name, tc := range map[string]struct {
				l       *core.Limiter
				allowed bool
				source  core.Source
			}{
				"open":     {open, true, core.SourceFailMode},
				"closed":   {closed, false, core.SourceFailMode},
				"fallback": {fallback, true, core.SourceFallback},
				"mixed":    {mixed, false, core.SourceFailMode},
			} {
				start := time.Now()
				var v limitertest.Verdict
				err := limitertest.AllowLayers(tc.l, ctx, checks, time.Time{}, &v)
				took := time.Since(start)
				require.NoError(t, err)
				require.ErrorIs(t, v.Err, limits.ErrStore, name)
				assert.Equal(t, tc.allowed, v.Allowed, name)
				assert.Equal(t, tc.source, v.Source, name)
				assert.Less(t, took, timeout+testwait.D(time.Second), "%s: bounded by the timeout, not the client", name)
				if name == "mixed" {
					assert.Equal(t, "login", v.Policy.Name, "the layer that failed closed binds")
					assert.Equal(t, time.Second, v.RetryAfter)
					assert.True(t, v.Decisions[0].Allowed, "the global layer failed open")
					var other limitertest.Verdict
					require.NoError(t, limitertest.AllowLayers(mixed, ctx, []core.Request{checks[0], {}, {}, checks[3]}, time.Time{}, &other))
					require.ErrorIs(t, other.Err, limits.ErrStore)
					assert.True(t, other.Allowed, "without the login layer, the request fails open")
				}
				if tc.source == core.SourceFallback {
					require.Len(t, v.Decisions, 4, name)
					assert.Zero(t, v.Decisions[1], "%s: the user layer, not checked", name)
					assert.Equal(t, "login", v.Policy.Name, "%s: the fallback's own layered decision", name)
				}
			}
		})
	}
	// The fallback decided all or nothing too: its login layer, five a
	// quarter hour, denies the sixth, and that denial took nothing from
	// the ip layer.
	for i := 0; i < 4; i++ {
		var v limitertest.Verdict
		require.NoError(t, limitertest.AllowLayers(fallback, ctx, checks, time.Time{}, &v))
		require.ErrorIs(t, v.Err, limits.ErrStore)
	}
	var fv limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(fallback, ctx, checks, time.Time{}, &fv))
	require.ErrorIs(t, fv.Err, limits.ErrStore)
	assert.False(t, fv.Allowed)
	assert.Equal(t, "login", fv.Policy.Name)
	assert.Equal(t, int64(300-5), fv.Decisions[3].Remaining, "the mirrored request and four more were admitted")
}
