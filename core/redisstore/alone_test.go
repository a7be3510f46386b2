package redisstore

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestAloneRunsOnTheCaller: decisions made one at a time through a
// Limiter over a default client run on their callers' goroutines (no
// flusher is ever started), one EVALSHA each, seen by a hook the user
// added before New; they decide exactly.
func TestAloneRunsOnTheCaller(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	counter := newCommandCounter()
	client.AddHook(counter)
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	t.Cleanup(func() { _ = s.Close() })
	waitChecked(t, s, 10*time.Second)
	other := mustNew(t, client)
	require.NotSame(t, s.batch.direct, other.batch.direct, "each Store has its own direct client")
	require.NoError(t, other.Close())
	for _, p := range policies(50, time.Hour) {
		p.Name = "alone"
		l, err := core.NewLimiter(alone(s), []core.Policy{p})
		require.NoError(t, err)
		counter.reset()
		admitted := 0
		for range 80 {
			d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, 50, admitted, p.Algorithm)
		names, pipelines := counter.snapshot()
		assert.Equal(t, 80, names["evalsha"], "%s: %v", p.Algorithm, names)
		assert.LessOrEqual(t, names["eval"], 1, "%s: one NOSCRIPT at most, on a new server: %v", p.Algorithm, names)
		// A new connection's handshake (HELLO, CLIENT SETINFO) is a
		// pipeline; no decision is.
		assert.LessOrEqual(t, pipelines, names["hello"], "%s: %v", p.Algorithm, names)
	}
	assert.Zero(t, s.batch.running.Load(), "no flusher started")

	// Layered decisions too.
	reqs := fourLayers("alone", time.Time{})
	out := make([]core.Decision, len(reqs))
	counter.reset()
	for range 5 {
		require.NoError(t, errOfN(s.takeAllUntil(context.Background(), time.Time{}, reqs, out, time.Now().Add(time.Second))))
	}
	names, _ := counter.snapshot()
	assert.Equal(t, 5, names["evalsha"], "%v", names)
	assert.Zero(t, s.batch.running.Load(), "no flusher started")
}

// TestAloneNotHeldByAFullPool: a lone decision (a deadline within
// maxAlone) runs over the Store's own
// connections, so a client pool that other work holds (a blocking command
// on its only connection) does not hold it up; the Store's own pool stays
// within two connections, and Close closes them.
func TestAloneNotHeldByAFullPool(t *testing.T) {
	srv := redistest.Start(t)
	opts := srv.Options()
	opts.PoolSize = 1
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Policy: core.Policy{Name: "pool", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}}
	_, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(time.Second))
	require.NoError(t, err)

	// The client pool's only connection, held by a blocking command until
	// the test pushes what it waits for: a decision that waited for the
	// client's pool would wait past any deadline.
	held := make(chan error, 1)
	list := testPrefix(t) + "nothing"
	go func() { held <- client.BLPop(ctx, 2*limitertest.StoreTimeout, list).Err() }()
	require.Eventually(t, func() bool { return client.PoolStats().IdleConns == 0 }, testwait.D(5*time.Second), time.Millisecond)
	for range 3 {
		_, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(time.Second))
		require.NoError(t, err, "a lone decision does not wait for the client's pool")
	}
	assert.LessOrEqual(t, s.batch.direct.PoolStats().TotalConns, uint32(1), "the Store's own pool: one connection for lone decisions")
	require.NoError(t, srv.Client().LPush(ctx, list, "done").Err())
	require.NoError(t, <-held, "the blocking command got what it waited for")
	require.NoError(t, s.Close())
	assert.Zero(t, s.batch.direct.PoolStats().TotalConns, "Close closes the Store's own connections")
}

// TestAloneAfterRestart: Redis restarts under a pool of idle connections
// to the old process; the next lone decision still gets an answer (a dead
// connection is found and replaced, or the decision is retried through the
// flushers, as the client would retry it).
func TestAloneAfterRestart(t *testing.T) {
	srv := redistest.StartWith(t)
	if srv.External() {
		t.Skip("REDIS_URL is set: this test restarts a server of its own")
	}
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	t.Cleanup(func() { _ = s.Close() })
	waitChecked(t, s, 10*time.Second)
	ctx := context.Background()
	req := core.Request{Key: "k", Cost: 1, Policy: core.Policy{Name: "restart", Algorithm: core.FixedWindow, Limit: 100, Window: time.Hour}}
	for range 3 {
		_, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(time.Second))
		require.NoError(t, err)
	}
	srv.Restart()
	for i := range 5 {
		d, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(time.Second))
		require.NoError(t, err, "decision %d after the restart", i)
		assert.True(t, d.Allowed)
	}
}

// TestAloneFrozenRedis: one decision at a time on a frozen Redis, with a
// default client (ReadTimeout 3s, 3 retries): each ends at its deadline
// with an error that says so, and none leaves a flusher stuck.
func TestAloneFrozenRedis(t *testing.T) {
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
	req := core.Request{Key: "k", Cost: 1, Policy: core.Policy{Name: "frozen", Algorithm: core.SlidingWindowLog, Limit: 100, Window: time.Hour}}
	_, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(time.Second))
	require.NoError(t, err)
	srv.Freeze()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	for range 5 {
		start := time.Now()
		_, _, err := s.takeUntil(ctx, time.Time{}, req, start.Add(60*time.Millisecond))
		took := time.Since(start)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var ne net.Error
		assert.True(t, errors.As(err, &ne) && ne.Timeout(), "the client's own timeout in the chain: %v", err)
		require.Less(t, took, 60*time.Millisecond+slack)
	}
	assert.Zero(t, s.batch.running.Load(), "no flusher started")
	srv.Thaw()
	thawed = true
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, _, err := s.takeUntil(ctx, time.Time{}, req, time.Now().Add(time.Second))
		assert.NoError(c, err)
	}, testwait.D(10*time.Second), 10*time.Millisecond)
}

// TestAloneKilledRedisFailsAtOnce: with Redis killed, a lone decision over
// a client that does not retry fails at once with the refused connection
// (the Store's own client never retries, and never waits out a retry
// backoff), not at its deadline.
func TestAloneKilledRedisFailsAtOnce(t *testing.T) {
	srv := redistest.StartWith(t)
	if srv.External() {
		t.Skip("REDIS_URL is set: this test kills a server of its own")
	}
	opts := srv.Options()
	opts.MaxRetries = -1
	opts.DialerRetryBackoff = func(int) time.Duration { return 0 }
	opts.DialerRetries = 2
	var dials atomic.Int32
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	t.Cleanup(func() { _ = s.Close() })
	req := core.Request{Key: "k", Cost: 1, Policy: core.Policy{Name: "killed", Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}}
	_, _, err := s.takeUntil(context.Background(), time.Time{}, req, time.Now().Add(time.Second))
	require.NoError(t, err)
	srv.Kill()
	for i := range 3 {
		dials.Store(0)
		start := time.Now()
		_, _, err := s.takeUntil(context.Background(), time.Time{}, req, start.Add(time.Second))
		require.Error(t, err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), testwait.D(500*time.Millisecond), "failed at once: %v", err)
		if i == 0 {
			// The first decision dials once (DialerRetries attempts), and
			// is not retried. (Once dials have failed PoolSize times, the
			// pool probes in the background, through the same dialer:
			// later decisions' counts would include those.)
			assert.LessOrEqual(t, dials.Load(), int32(2), "one dial of DialerRetries attempts, no retry")
		}
	}
}

// TestNewWhileTheClientConnects: Stores made over a client while it opens
// connections (go-redis writes its options then, under a lock of its own)
// copy the options without racing with those writes (run under -race).
func TestNewWhileTheClientConnects(t *testing.T) {
	srv := redistest.Start(t)
	for range 5 {
		opts := srv.Options()
		opts.PoolSize = 8
		client := redis.NewClient(opts)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 8 {
				_ = client.Ping(context.Background()).Err()
			}
		}()
		for range 8 {
			s := mustNew(t, client)
			require.NoError(t, s.Close())
		}
		<-done
		require.NoError(t, client.Close())
	}
}
