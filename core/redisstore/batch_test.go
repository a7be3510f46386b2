package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// concurrently runs n decisions of l on keys from 64 goroutines and
// returns how many were admitted.
func concurrently(t *testing.T, l *core.Limiter, n int, key func(i int) string) int64 {
	t.Helper()
	var admitted, next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				d, err := l.AllowN(context.Background(), key(i), 1, time.Time{})
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// TestBatchRoundTrips: concurrent decisions through a Limiter go out in
// pipelines, never more round trips (commands plus pipelines) than
// decisions, and stay exact: against a limit of 500, exactly 500 of 2,000
// racing requests pass, whether the scripts are loaded or not.
func TestBatchRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	hook := newCommandCounter()
	c.AddHook(hook)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	t.Cleanup(func() { _ = s.Close() })
	waitChecked(t, s, 10*time.Second)
	require.False(t, s.honoursDeadline())
	for _, flush := range []bool{false, true} {
		t.Run("script-flush="+strconv.FormatBool(flush), func(t *testing.T) {
			if flush && srv.External() {
				t.Skip("REDIS_URL is set: not flushing the scripts of a shared server")
			}
			for _, p := range policies(500, time.Hour) {
				p.Name = "batch-" + strconv.FormatBool(flush)
				l, err := core.NewLimiter(within(s, 10*time.Second), []core.Policy{p})
				require.NoError(t, err)
				if flush {
					require.NoError(t, c.ScriptFlush(context.Background()).Err())
				}
				hook.reset()
				const n = 2000
				got := concurrently(t, l, n, func(int) string { return "hot" })
				assert.EqualValues(t, 500, got, "%s: admitted of %d racing requests", p.Algorithm, n)
				names, pipelines := hook.snapshot()
				trips := names["evalsha"] + names["eval"] + pipelines
				t.Logf("%s: %d decisions in %d round trips (%d pipelines, %v)", p.Algorithm, n, trips, pipelines, names)
				assert.LessOrEqual(t, trips, n+2*len(names), "%s: round trips", p.Algorithm) // a NOSCRIPT costs one more
				if !flush {
					assert.LessOrEqual(t, trips, n, "%s: round trips", p.Algorithm)
				}
			}
		})
	}
}

// TestBatchManyKeys: concurrent decisions over many keys are each decided
// on their own key: 64 goroutines, 200 keys, 3 requests a key against a
// limit of 2, exactly 400 admitted.
func TestBatchManyKeys(t *testing.T) {
	s, _, _ := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	for _, p := range policies(2, time.Hour) {
		l, err := core.NewLimiter(within(s, 10*time.Second), []core.Policy{p})
		require.NoError(t, err)
		got := concurrently(t, l, 600, func(i int) string { return "k" + strconv.Itoa(i%200) })
		assert.EqualValues(t, 400, got, "%s: admitted", p.Algorithm)
	}
}

// TestBatchLockout: a policy with a lockout goes through the batch too.
func TestBatchLockout(t *testing.T) {
	s, _, _ := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	p := core.Policy{Name: "lo", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour, Lockout: time.Hour}
	l, err := core.NewLimiter(within(s, 10*time.Second), []core.Policy{p})
	require.NoError(t, err)
	got := concurrently(t, l, 300, func(int) string { return "hot" })
	assert.EqualValues(t, 5, got, "admitted")
	d, err := l.AllowN(context.Background(), "hot", 1, time.Time{})
	require.NoError(t, err)
	assert.True(t, d.LockedOut, "%+v", d)
}

// TestTakeByDeadline: TakeBy returns by its deadline on a frozen server,
// with a default client (which would wait ReadTimeout, 3s), and a deadline
// already passed sends nothing.
func TestTakeByDeadline(t *testing.T) {
	srv := redistest.StartWith(t)
	if srv.External() {
		t.Skip("REDIS_URL is set: this test freezes a server of its own")
	}
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	t.Cleanup(func() { _ = s.Close() })
	waitChecked(t, s, 10*time.Second)
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Policy: core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}}
	_, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(5*time.Second))
	require.NoError(t, err)
	_, _, err = s.takeUntil(ctx, time.Time{}, req, time.Now().Add(-time.Millisecond))
	require.Error(t, err, "a deadline already passed")

	srv.Freeze()
	defer srv.Thaw()
	for range 30 { // more than the flushers
		start := time.Now()
		_, _, err := s.takeUntil(ctx, time.Time{}, req, start.Add(50*time.Millisecond))
		took := time.Since(start)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, took, 50*time.Millisecond+slack, "TakeBy on a frozen server")
	}
}

// TestClose: after Close, decisions through a Limiter fail (and the
// Limiter's fail mode decides), and so does the Store's own Take.
func TestClose(t *testing.T) {
	s, _, _ := newStore(t)
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	l, err := core.NewLimiter(alone(s), []core.Policy{p})
	require.NoError(t, err)
	d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.Equal(t, core.SourceStore, d.Source)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second Close")
	d, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrStore)
	require.ErrorIs(t, d.Err, redis.ErrClosed)
	require.Equal(t, core.SourceFailMode, d.Source)
	_, _, err = take1(s, context.Background(), time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
	require.ErrorIs(t, err, redis.ErrClosed, "Take after Close")
}
