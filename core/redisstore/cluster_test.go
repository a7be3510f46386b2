package redisstore

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestCluster runs every algorithm over a Redis Cluster of three masters on
// 120 client keys: no CROSSSLOT or MOVED error surfaces, the keys spread
// over every master, and each client key admits exactly its limit.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	const limit, keys, workers = 7, 120, 8

	ps := policies(limit, time.Hour)
	// Every decision is at t0 (AllowAt), so that no bucket refills during
	// the test.
	lims := make([]*core.Limiter, len(ps))
	for i, p := range ps {
		l, err := core.NewLimiter(s, []core.Policy{p})
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	var (
		mu       sync.Mutex
		admitted = map[string]int{}
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for wk := range workers {
		wg.Go(func() {
			for k := wk; k < keys; k += workers {
				key := fmt.Sprintf("client-%d", k)
				for _, l := range lims {
					for range limit + 3 {
						d, err := l.AllowN(ctx, key, 1, t0)
						if err != nil {
							errs <- fmt.Errorf("%s %s: %w", l.Policies()[0].Algorithm, key, err)
							return
						}
						if d.Allowed {
							mu.Lock()
							admitted[string(l.Policies()[0].Algorithm)+" "+key]++
							mu.Unlock()
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, p := range ps {
		for k := range keys {
			assert.Equal(t, limit, admitted[fmt.Sprintf("%s client-%d", p.Algorithm, k)], "%s client-%d: admitted", p.Algorithm, k)
		}
	}

	// The keys spread over all masters.
	masters := map[string]int{}
	for k := range keys {
		base := s.stateKey(fmt.Sprintf("client-%d", k), ps[0])
		m, err := c.MasterForKey(ctx, base)
		require.NoError(t, err)
		masters[m.Options().Addr]++
	}
	require.Len(t, masters, 3, "masters holding keys")

	// Every key written has a TTL.
	all := scanKeys(t, ctx, c, s.prefix)
	require.Len(t, all, keys*len(ps), "keys scanned")
	for _, k := range all {
		assert.Positive(t, c.PTTL(ctx, k).Val(), "%s: PTTL", k)
	}
	require.NoError(t, s.CheckConfig(ctx), "CheckConfig over the cluster: every master answers")
	for _, p := range ps {
		require.NoError(t, s.Reset(ctx, "client-0", p), "%s: Reset over the cluster", p.Algorithm)
	}
}

// TestNodeFailure: the errors that make a cluster client reload its slot
// map are those of an unreachable, slow or displaced node, taken here from
// real clients and real Redis replies; a healthy node's own replies, the
// caller's cancellation and a closed client are not.
func TestNodeFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	reply := func(msg string) error {
		err := c.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
		require.Error(t, err, msg)
		return fmt.Errorf("redisstore: wrapped: %w", err)
	}

	refusedPort, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedAddr := refusedPort.Addr().String()
	require.NoError(t, refusedPort.Close())
	dead := redis.NewClient(&redis.Options{Addr: refusedAddr, MaxRetries: -1, DialerRetries: 1})
	refused := dead.Ping(ctx).Err()
	require.Error(t, refused)
	require.NoError(t, dead.Close())
	closed := dead.Ping(ctx).Err()
	require.ErrorIs(t, closed, redis.ErrClosed)
	canceledCtx, cancel := context.WithCancel(ctx)
	cancel()
	canceled := c.Ping(canceledCtx).Err()
	require.ErrorIs(t, canceled, context.Canceled)

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"EOF", fmt.Errorf("redisstore: %w", io.EOF), true},
		{"deadline", fmt.Errorf("redisstore: %w", context.DeadlineExceeded), true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"MOVED", reply("MOVED 3999 127.0.0.1:7001"), true},
		{"ASK", reply("ASK 3999 127.0.0.1:7001"), true},
		{"CLUSTERDOWN", reply("CLUSTERDOWN The cluster is down"), true},
		{"TRYAGAIN", reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"READONLY", reply("READONLY You can't write against a read only replica."), true},
		{"LOADING", reply("LOADING Redis is loading the dataset in memory"), true},
		{"MASTERDOWN", reply("MASTERDOWN Link with MASTER is down"), true},
		{"nil", nil, false},
		{"canceled by the caller", canceled, false},
		{"closed client", closed, false},
		{"script error", reply("ERR boom"), false},
		{"WRONGTYPE", reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"OOM", reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"BUSY", reply("BUSY Redis is busy running a script."), false},
		{"redis.Nil", redis.Nil, false},
	} {
		assert.Equal(t, tc.want, nodeFailure(tc.err), "%s: %v", tc.name, tc.err)
	}
}

// countingCluster is a cluster client wrapped by its user, as New accepts
// it: it counts the reloads asked for.
type countingCluster struct {
	*redis.ClusterClient
	reloads atomic.Int64
}

func (c *countingCluster) ReloadState(ctx context.Context) {
	c.reloads.Add(1)
	c.ClusterClient.ReloadState(ctx)
}

// clusterOver returns a cluster client whose whole slot map is the
// standalone server at addr, read through ClusterSlots, which counts its
// calls and, while block is open, waits until it closes.
func clusterOver(t testing.TB, addr string, loads *atomic.Int64, block <-chan struct{}) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			// The first load is the start-up check's (New); block only the
			// reloads asked for after it.
			if loads.Add(1) > 1 && block != nil {
				<-block
			}
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClusterRecoveryRateLimited: however many decisions fail, and from
// however many goroutines, a Store asks its cluster client for at most one
// reload per reloadEvery; errors of a healthy node ask for none; and the
// reload does reach the cluster.
func TestClusterRecoveryRateLimited(t *testing.T) {
	srv := redistest.Start(t)
	var loads atomic.Int64
	cc := &countingCluster{ClusterClient: clusterOver(t, srv.Addr(), &loads, nil)}
	s := mustNew(t, cc)
	require.NotNil(t, s.recovery)
	waitChecked(t, s, 5*time.Second)
	atStart := loads.Load()

	s.recovery.failed(fmt.Errorf("redisstore: %w", context.Canceled))
	s.recovery.failed(redis.Nil)
	assert.Zero(t, cc.reloads.Load(), "reloads for errors that are not a node's failure")

	// A failure now asks for a reload; then every goroutine fails until
	// span has passed, each once more after it has, so that a failure
	// comes more than reloadEvery after the first however the machine
	// schedules them: at least two reloads, whatever the load.
	const span = 500 * time.Millisecond
	start := time.Now()
	s.recovery.failed(io.EOF)
	var wg sync.WaitGroup
	var calls atomic.Int64
	calls.Add(1)
	for range 4 {
		wg.Go(func() {
			for {
				s.recovery.failed(io.EOF)
				calls.Add(1)
				if time.Since(start) >= span {
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := cc.reloads.Load()
	t.Logf("%d failures in %v asked for %d reloads", calls.Load(), elapsed, n)
	assert.LessOrEqual(t, n, int64(elapsed/reloadEvery)+1, "reloads asked for")
	assert.GreaterOrEqual(t, n, int64(2), "reloads asked for in %v", elapsed)
	waitFor(t, 5*time.Second, "reload of the slot map", func() bool { return loads.Load() > atStart })
}

// TestClusterRecoveryNeverWaits: a failed decision asks for a reload
// without waiting for it, even when the reload hangs: go-redis's
// ReloadState only starts one. A go-redis release that made it wait would
// fail here rather than stall decisions.
func TestClusterRecoveryNeverWaits(t *testing.T) {
	srv := redistest.Start(t)
	var loads atomic.Int64
	block := make(chan struct{})
	defer close(block)
	s := mustNew(t, clusterOver(t, srv.Addr(), &loads, block))
	waitChecked(t, s, 5*time.Second) // its load of the slot map is not blocked
	returned := make(chan struct{})
	go func() {
		s.recovery.failed(io.EOF)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(testwait.D(5 * time.Second)):
		t.Fatal("a failed decision waited for the reload of the slot map")
	}
	// The reload has started, and is still hanging on ClusterSlots.
	waitFor(t, 5*time.Second, "reload of the slot map", func() bool { return loads.Load() == 2 })
}

// TestClusterRecoveryClients: only clients with a slot map get a recovery;
// a standalone client, and a Sentinel failover client (which asks the
// Sentinels for the master at every new connection and drops the old
// master's connections on +switch-master), need none.
func TestClusterRecoveryClients(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"standalone", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{"sentinel failover", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), false},
		{"universal, one address", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), true},
		{"universal, several addresses", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}), true},
		{"wrapped cluster", &countingCluster{ClusterClient: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}, true},
	} {
		assert.Equal(t, tc.want, mustNew(t, tc.client).recovery != nil, tc.name)
		require.NoError(t, tc.client.Close())
	}
}

// BenchmarkClusterRecoveryFailed measures what a decision that fails on a
// node pays for the recovery: a clock read and an atomic load, and one
// ReloadState per reloadEvery.
func BenchmarkClusterRecoveryFailed(b *testing.B) {
	srv := redistest.Start(b)
	var loads atomic.Int64
	s := mustNew(b, clusterOver(b, srv.Addr(), &loads, nil))
	b.ReportAllocs()
	for b.Loop() {
		s.recovery.failed(io.EOF)
	}
}
