package rediswatch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/testkit/gridtest"
	// The generous store timeout of the module's tests (10 s): the grid
	// makes thousands of decisions through Redis, and none is about a
	// timeout; under -race on a busy machine one outlasted the default
	// 100 ms.
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/overrides"
)

// TestWatcherTighteningNeverSwitchesLimitingOff is the hardening issue's
// reproduction: a token bucket of 100 an hour with a burst of 10,000, a
// client that has used its burst, and Put("api", limit=1) through Redis.
// The burst the override leaves (10,000 at 1 an hour: 416 days to fill)
// used to make the policy invalid, the Limiter fell to its fail mode,
// open by default, and admitted every request, each with an error. Now
// the burst is clamped to what 1 an hour refills within limits.MaxWindow:
// the override tightens, and the client stays denied.
func TestWatcherTighteningNeverSwitchesLimitingOff(t *testing.T) {
	srv := redistest.Start(t)
	w, _ := openOverrides(t, srv.Client(), newKey())
	store, err := redisstore.New(srv.Client(), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	policy := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 100, Window: time.Hour, Burst: 10_000}
	l, err := core.NewLimiter(store, []core.Policy{policy}, core.WithPolicySource(w))
	require.NoError(t, err)
	ctx := context.Background()
	key := "client-" + strings.ReplaceAll(t.Name(), "/", "-")
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

	d, err := l.AllowN(ctx, key, 10_000, now)
	require.NoError(t, err)
	require.True(t, d.Allowed, "the whole burst")
	d, err = l.AllowN(ctx, key, 1, now)
	require.NoError(t, err)
	require.False(t, d.Allowed, "the burst used: denied")

	require.NoError(t, w.Put(ctx, "api", overrides.Override{Limit: 1}))

	// 1,000 requests over the next hour (3.6 s apart): at 1 an hour from
	// an empty bucket, not one token refills before the hour is out.
	admitted, errs := 0, 0
	var last core.Decision
	for i := range 1000 {
		d, err := l.AllowN(ctx, key, 1, now.Add(time.Duration(i)*3600*time.Millisecond))
		if err != nil {
			errs++
			if errs == 1 {
				t.Logf("first error: %v", err)
			}
		}
		if d.Allowed {
			admitted++
		}
		last = d
	}
	assert.Zero(t, errs, "no decision fails on the override")
	assert.Zero(t, admitted, "the tighter override keeps the client denied")
	assert.Equal(t, core.SourceStore, last.Source)
	assert.Equal(t, int64(1), last.Policy.Limit, "decided by the override")
	assert.NoError(t, last.Policy.Validate())
	assert.Less(t, last.Policy.Burst, policy.Burst, "the burst clamped down, to what 1 an hour refills within MaxWindow")
}

// TestWatcherGridNeverLooser is the grid of package gridtest through
// Watchers (Put through Redis) over the Redis store: one case in 7, and
// the policy whole (the overrides package runs the whole grid
// through an overrides.Set on both stores).
func TestWatcherGridNeverLooser(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(), redisstore.WithPrefix("watchergrid:"), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	gridtest.Run(t, gridtest.Config{
		Store: store,
		NewSource: func(t *testing.T) gridtest.Source {
			w, logs := openOverrides(t, srv.Client(), newKey())
			put := func(layer string, o overrides.Override) error { return w.Put(context.Background(), layer, o) }
			return gridtest.Source{Adjust: w, Put: put, Logs: logs.String}
		},
		Loads:    []float64{1, 0.5, 0.001},
		Every:    7,
		MaxDrain: time.Duration(1<<53) * time.Microsecond, // see gridtest.Config.MaxDrain
	})
}

// TestWatcherRawUnfitOverrideKeepsTheLastGood: another writer (redis-cli,
// an older version of this package) stores an override that parses but
// cannot apply to the layer's policy: a burst of 10,000 at 1 an hour. The
// last good override stays in force, no decision fails, and it is logged
// once however many requests and polls meet it. Put refuses the same
// value, writing nothing. A raw value that only tightens (limit=1, the
// burst it keeps clamped) is applied.
func TestWatcherRawUnfitOverrideKeepsTheLastGood(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	raw := srv.Client()
	w, logs := openOverrides(t, srv.Client(), key)
	store, err := redisstore.New(srv.Client(), redisstore.WithPrefix("rawunfit:"), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	policy := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 100, Window: time.Hour, Burst: 10_000}
	l, err := core.NewLimiter(store, []core.Policy{policy}, core.WithPolicySource(w))
	require.NoError(t, err)
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	decide := func(key string) core.Decision {
		t.Helper()
		d, err := l.AllowN(ctx, key, 1, now)
		require.NoError(t, err, "no decision fails on an override")
		require.Equal(t, core.SourceStore, d.Source)
		return d
	}
	require.Equal(t, policy, decide("first").Policy)

	require.NoError(t, w.Put(ctx, "api", overrides.Override{Limit: 50}))
	require.Equal(t, int64(50), decide("a").Policy.Limit)

	require.NoError(t, raw.HSet(ctx, key, "api", "limit=1 burst=10000").Err())
	require.NoError(t, w.Sync(ctx))
	for range 50 {
		d := decide("b")
		assert.Equal(t, int64(50), d.Policy.Limit, "the last good override stays in force")
		assert.Equal(t, int64(10_000), d.Policy.Burst)
	}
	require.NoError(t, w.Sync(ctx))
	waitReads(t, w, 2)
	decide("b")
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "cannot apply"), "logged once, not per request or poll: %s", out)
	assert.Contains(t, out, `override="limit=1 burst=10000"`)
	assert.Contains(t, out, `kept="limit=50"`)

	// Put refuses the same value where it is written.
	err = w.Put(ctx, "api", overrides.Override{Limit: 1, Burst: 10_000})
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	v, err := raw.HGet(ctx, key, "api").Result()
	require.NoError(t, err)
	assert.Equal(t, "limit=1 burst=10000", v, "nothing written")

	// A raw value that only tightens is applied, its kept burst clamped.
	require.NoError(t, raw.HSet(ctx, key, "api", "limit=1").Err())
	require.NoError(t, w.Sync(ctx))
	d := decide("c")
	assert.Equal(t, int64(1), d.Policy.Limit)
	assert.Equal(t, int64(8784), d.Policy.Burst)
	assert.True(t, d.Allowed, "a new client: the clamped burst")
}
