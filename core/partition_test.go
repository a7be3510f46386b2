package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// nodesStore is a Partitioned store of nodes, each a memstore, like the
// masters of a Redis Cluster: a key's node is the part of the key before
// its first '-'. A node that is down fails its keys' requests; a Take
// over several nodes sets out[i].Err of each request i on a node down,
// unless anonymous is set (a failure the store cannot place, such as a
// timeout of the whole call).
type nodesStore struct {
	nodes     map[string]*memstore.Store
	down      map[string]*atomic.Bool
	anonymous bool
	calls     atomic.Int64
}

func newNodesStore(t *testing.T, names ...string) *nodesStore {
	s := &nodesStore{nodes: map[string]*memstore.Store{}, down: map[string]*atomic.Bool{}}
	for _, n := range names {
		s.nodes[n], s.down[n] = newMemStore(t), new(atomic.Bool)
	}
	return s
}

func nodeOf(key string) string { n, _, _ := strings.Cut(key, "-"); return n }

func (s *nodesStore) Partitioner() func(string) string { return nodeOf }

func (s *nodesStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.calls.Add(1)
	if len(reqs) == 1 {
		n := nodeOf(reqs[0].Key)
		if s.down[n].Load() {
			return time.Time{}, fmt.Errorf("dial tcp %s: connect: connection refused", n)
		}
		return s.nodes[n].Take(ctx, now, reqs, out)
	}
	var errs []error
	for i, r := range reqs {
		if n := nodeOf(r.Key); s.down[n].Load() {
			err := fmt.Errorf("dial tcp %s: connect: connection refused", n)
			if !s.anonymous {
				out[i].Err = err
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	for i, r := range reqs { // no contention in these tests: one at a time is all or nothing
		d, err := storecall.Peek(s.nodes[nodeOf(r.Key)], ctx, now, r)
		if err != nil {
			return time.Time{}, err
		}
		out[i] = d
	}
	for i := range reqs {
		if !out[i].Allowed {
			return now, nil
		}
	}
	for i, r := range reqs {
		out[i], _, _ = storecall.Take(s.nodes[nodeOf(r.Key)], ctx, now, r)
	}
	return now, nil
}

func (s *nodesStore) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errQuiet
}

func (s *nodesStore) Refund(context.Context, time.Time, []core.Request) error { return errQuiet }

func (s *nodesStore) Reset(ctx context.Context, key string, p core.Policy) error {
	return s.nodes[nodeOf(key)].Reset(ctx, key, p)
}

var big = core.Policy{Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second}

// TestPartitionBreakerConfinesADeadNode: one node of three down opens its
// own breaker only; the other nodes' keys keep deciding through the store,
// and the dead node's closes after a probe once it is back. One breaker
// per Limiter failed every key open.
func TestPartitionBreakerConfinesADeadNode(t *testing.T) {
	s := newNodesStore(t, "a", "b", "c")
	l, err := core.NewLimiter(s, []core.Policy{big})
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	s.down["a"].Store(true)
	for i := range 5 {
		d, err := l.AllowN(ctx, "a-client", 1, t0)
		require.NoError(t, err)
		require.Equal(t, core.SourceFailMode, d.Source)
		require.ErrorIs(t, d.Err, limits.ErrStore)
		if i >= 3 {
			require.ErrorIs(t, d.Err, limits.ErrCircuitOpen, "request %d: the breaker opens after 3 failures", i)
		}
	}
	require.Equal(t, core.Failing, l.HealthAt(t0))
	for _, k := range []string{"b-client", "c-client", "b-other"} {
		for range 5 {
			d, err := l.AllowN(ctx, k, 1, t0)
			require.NoError(t, err)
			require.Equal(t, core.SourceStore, d.Source, "%s, a healthy node's key: %v", k, d.Err)
			require.True(t, d.Allowed)
		}
	}
	// Node a back: the first request after the probe interval probes it
	// and closes its breaker.
	s.down["a"].Store(false)
	d, err := l.AllowN(ctx, "a-client", 1, t0.Add(50*time.Millisecond))
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrCircuitOpen, "no probe before the interval")
	d, err = l.AllowN(ctx, "a-other", 1, t0.Add(100*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, core.SourceStore, d.Source, "the probe")
	require.Equal(t, core.Healthy, l.HealthAt(t0.Add(100*time.Millisecond)))
}

// TestPartitionBreakerLayers: a layered request over two nodes, one of
// them down, counts its failure against the dead node's breaker alone
// (the store's out[i].Err says which); once that breaker is open, a
// request that needs the dead node fails over at once, and one that does
// not goes on through the store. A failure the store cannot place counts
// against no breaker of a request over several nodes.
func TestPartitionBreakerLayers(t *testing.T) {
	two := []core.Policy{{Name: "user", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second},
		{Name: "all", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second}}
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	spread := []core.Request{{Key: "a-user", Cost: 1}, {Key: "b-all", Cost: 1}}
	onB := []core.Request{{Key: "b-user", Cost: 1}, {Key: "b-all", Cost: 1}}
	onC := []core.Request{{Key: "c-user", Cost: 1}, {Key: "c-all", Cost: 1}}

	t.Run("named", func(t *testing.T) {
		s := newNodesStore(t, "a", "b", "c")
		l, err := core.NewLimiter(s, two)
		require.NoError(t, err)
		s.down["a"].Store(true)
		for range 3 {
			d, _, err := l.AllowLayers(ctx, t0, spread, nil)
			require.NoError(t, err)
			require.Equal(t, core.SourceFailMode, d.Source)
			require.NotErrorIs(t, d.Err, limits.ErrCircuitOpen)
		}
		calls := s.calls.Load()
		d, _, err := l.AllowLayers(ctx, t0, spread, nil)
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrCircuitOpen, "a's breaker is open")
		require.Equal(t, calls, s.calls.Load(), "the store was not asked")
		for _, checks := range [][]core.Request{onB, onC} {
			d, _, err = l.AllowLayers(ctx, t0, checks, nil)
			require.NoError(t, err)
			require.Equal(t, core.SourceStore, d.Source, "%v: %v", checks, d.Err)
		}
		d, err = l.AllowN(ctx, "b-client", 1, t0)
		require.NoError(t, err)
		require.Equal(t, core.SourceStore, d.Source)
		// a back: a spread request probes it (b's breaker closed).
		s.down["a"].Store(false)
		d, _, err = l.AllowLayers(ctx, t0.Add(100*time.Millisecond), spread, nil)
		require.NoError(t, err)
		require.Equal(t, core.SourceStore, d.Source)
		require.Equal(t, core.Healthy, l.HealthAt(t0.Add(100*time.Millisecond)))
	})
	t.Run("once per breaker", func(t *testing.T) {
		// Two of three layers on the dead node, apart: its breaker counts
		// one failure per request, the live node's none.
		three := append(append([]core.Policy(nil), two...),
			core.Policy{Name: "route", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second})
		s := newNodesStore(t, "a", "b")
		l, err := core.NewLimiter(s, three)
		require.NoError(t, err)
		s.down["a"].Store(true)
		reqs := []core.Request{{Key: "b-user", Cost: 1}, {Key: "a-all", Cost: 1}, {Key: "a-route", Cost: 1}}
		for i := range 3 {
			d, _, err := l.AllowLayers(ctx, t0, reqs, nil)
			require.NoError(t, err)
			require.Equal(t, core.SourceFailMode, d.Source)
			require.NotErrorIs(t, d.Err, limits.ErrCircuitOpen, "request %d: a failure counted once, not once per request on the node", i)
		}
		d, _, err := l.AllowLayers(ctx, t0, reqs, nil)
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrCircuitOpen, "a's breaker is open after 3 failures")
		d, _, err = l.AllowLayers(ctx, t0, onB, nil)
		require.NoError(t, err)
		require.Equal(t, core.SourceStore, d.Source, "b's breaker is closed: %v", d.Err)
	})
	t.Run("anonymous", func(t *testing.T) {
		s := newNodesStore(t, "a", "b", "c")
		s.anonymous = true
		l, err := core.NewLimiter(s, two)
		require.NoError(t, err)
		s.down["a"].Store(true)
		for range 10 {
			d, _, err := l.AllowLayers(ctx, t0, spread, nil)
			require.NoError(t, err)
			require.Equal(t, core.SourceFailMode, d.Source)
			require.NotErrorIs(t, d.Err, limits.ErrCircuitOpen, "a failure no partition claims opens no breaker")
		}
		d, _, err := l.AllowLayers(ctx, t0, onB, nil)
		require.NoError(t, err)
		require.Equal(t, core.SourceStore, d.Source)
		assert.Equal(t, core.Healthy, l.HealthAt(t0))
	})
}

// TestPartitionBreakerFallback: with a fallback, only the dead node's keys
// are decided by it; the Limiter is Recovering after the node is back,
// for every key (the degraded period is the Limiter's: a key's partition
// may change name across a failover).
func TestPartitionBreakerFallback(t *testing.T) {
	s := newNodesStore(t, "a", "b")
	l, err := core.NewLimiter(s, []core.Policy{big}, core.WithFallback(newMemStore(t)))
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	s.down["a"].Store(true)
	for range 4 {
		d, err := l.AllowN(ctx, "a-client", 1, t0)
		require.NoError(t, err)
		require.Equal(t, core.SourceFallback, d.Source)
	}
	d, err := l.AllowN(ctx, "b-client", 1, t0)
	require.NoError(t, err)
	require.Equal(t, core.SourceStore, d.Source)
	require.Equal(t, core.Failing, l.HealthAt(t0))
	s.down["a"].Store(false)
	d, err = l.AllowN(ctx, "a-client", 1, t0.Add(100*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, core.SourceStore, d.Source)
	require.Equal(t, core.Recovering, l.HealthAt(t0.Add(100*time.Millisecond)))
	require.Equal(t, core.Healthy, l.HealthAt(t0.Add(100*time.Millisecond+2*time.Second)))
}

// TestPartitionsBounded: a store that names a partition per key (by
// mistake) does not grow the Limiter's breakers without bound, and an idle
// open breaker (its partition no longer named: a failed-over master) stops
// making the Limiter Failing.
func TestPartitionsBounded(t *testing.T) {
	s := newNodesStore(t, "a")
	for i := range 1500 {
		n := fmt.Sprintf("n%d", i)
		s.nodes[n], s.down[n] = s.nodes["a"], new(atomic.Bool)
	}
	l, err := core.NewLimiter(s, []core.Policy{big})
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Unix(1_000_000, 0)
	for i := range 1500 {
		d, err := l.AllowN(ctx, fmt.Sprintf("n%d-k", i), 1, t0)
		require.NoError(t, err)
		require.Equal(t, core.SourceStore, d.Source)
	}
	assert.LessOrEqual(t, l.Partitions(), 1024)
	s.down["n7"].Store(true)
	for range 3 {
		_, err := l.AllowN(ctx, "n7-k", 1, t0)
		require.NoError(t, err)
	}
	require.Equal(t, core.Failing, l.HealthAt(t0))
	require.Equal(t, core.Failing, l.HealthAt(t0.Add(time.Second)), "met by no request for 10 probe intervals")
	require.Equal(t, core.Healthy, l.HealthAt(t0.Add(1101*time.Millisecond)), "idle")
}
