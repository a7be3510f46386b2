package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/storetest"
	"github.com/apigate/ratelimit/internal/redistest"
)

// spreadKeys returns n client keys whose state keys are in n distinct
// slots, spread over every master of c, and checks slot against CLUSTER
// KEYSLOT on the way.
func spreadKeys(t *testing.T, s *Store, c *redis.ClusterClient, n int) []string {
	t.Helper()
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}
	var keys []string
	slots := map[uint16]bool{}
	masters := map[string]bool{}
	for i := 0; len(keys) < n; i++ {
		key := fmt.Sprintf("client-%d", i)
		k := s.stateKey(key, p)
		want, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		require.Equal(t, want, int64(slot(key)), "%s: slot", k)
		m, err := c.MasterForKey(ctx, k)
		require.NoError(t, err)
		addr := m.Options().Addr
		// The first three on three masters, then any new slot.
		if slots[slot(key)] || (len(keys) < 3 && masters[addr]) {
			continue
		}
		slots[slot(key)], masters[addr] = true, true
		keys = append(keys, key)
	}
	return keys
}

// afterPipeline is a go-redis hook that calls do, once, after the first
// pipeline that follows arm.
type afterPipeline struct {
	mu    sync.Mutex
	armed bool
	do    func()
}

func (*afterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*afterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *afterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.mu.Lock()
		fire := h.armed
		h.armed = false
		h.mu.Unlock()
		if fire {
			h.do()
		}
		return err
	}
}

func (h *afterPipeline) arm(do func()) {
	h.mu.Lock()
	h.armed, h.do = true, do
	h.mu.Unlock()
}

// snapshot returns the state of key: a string's bytes, or a log's members
// and scores.
func snapshot(t *testing.T, c redis.UniversalClient, key string) string {
	t.Helper()
	ctx := context.Background()
	switch typ := c.Type(ctx, key).Val(); typ {
	case "string":
		return c.Get(ctx, key).Val()
	case "zset":
		return fmt.Sprint(c.ZRangeWithScores(ctx, key, 0, -1).Val())
	default:
		return typ
	}
}

// TestMultiClusterUndo: over a Redis Cluster, five layers of five
// algorithms on client keys in five slots over the three masters, and a
// sixth that denies: the groups that admitted are undone, every state
// left as it was before the denied request, and their TTLs kept; one
// pipeline decides, one undoes.
func TestMultiClusterUndo(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	counter := newCommandCounter()
	c.AddHook(counter)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	keys := spreadKeys(t, s, c, 6)
	t0 := time.UnixMicro(1_700_000_000_000_000)
	var reqs []core.Request
	for i, a := range core.Algorithms() {
		p := core.Policy{Name: "room", Algorithm: a, Limit: 10, Window: 10 * time.Second}
		reqs = append(reqs, core.Request{Key: keys[i], Policy: p, Cost: 2, Now: t0})
	}
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: 10 * time.Second}
	reqs = append(reqs, core.Request{Key: keys[5], Policy: tight, Cost: 1, Now: t0})
	out := make([]core.Decision, len(reqs))
	require.NoError(t, s.TakeAll(ctx, reqs, out))
	<-s.checked // New's check of the configuration is done: its commands are not counted
	before := make([]string, len(reqs))
	ttls := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "first request, layer %d", i)
		k := s.stateKey(r.Key, r.Policy)
		before[i], ttls[i] = snapshot(t, c, k), c.PTTL(ctx, k).Val()
	}

	for i := range reqs {
		reqs[i].Now = t0.Add(time.Second)
	}
	counter.reset()
	require.NoError(t, s.TakeAll(ctx, reqs, out))
	names, pipelines := counter.snapshot()
	assert.Empty(t, names, "commands outside pipelines")
	assert.LessOrEqual(t, pipelines, 3, "pipelines: the decision, the undo (and its script's load)")
	for i, r := range reqs {
		k := s.stateKey(r.Key, r.Policy)
		assert.Equal(t, i < 5, out[i].Allowed, "layer %d", i)
		assert.Equal(t, before[i], snapshot(t, c, k), "%s: as it was before the denied request", k)
		ttl := c.PTTL(ctx, k).Val()
		assert.Positive(t, ttl, "%s: TTL", k)
		assert.LessOrEqual(t, ttl, ttls[i], "%s: TTL", k)
	}
	// The layers alone find what the first request left.
	for i, r := range reqs[:5] {
		got := make([]core.Decision, 1)
		require.NoError(t, s.TakeAll(ctx, []core.Request{r}, got))
		assert.True(t, got[0].Allowed, "layer %d alone", i)
		if r.Policy.Algorithm.IsBucket() {
			assert.GreaterOrEqual(t, got[0].Remaining, int64(6), "layer %d alone: remaining", i)
		} else {
			assert.Equal(t, int64(6), got[0].Remaining, "layer %d alone: remaining", i)
		}
	}
}

// TestMultiClusterUndoContended: another decision on the layers' keys
// between a layered request's decision and its undo. The undo gives back
// exactly the units the request took from the window counters, removes
// exactly its member from the log, and leaves the buckets as they are:
// never more than it took.
func TestMultiClusterUndoContended(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	hook := &afterPipeline{}
	c.AddHook(hook)
	prefix := testPrefix(t)
	s := mustNew(t, c, WithPrefix(prefix))
	other := mustNew(t, cl.Client(), WithPrefix(prefix)) // another app server
	ctx := context.Background()
	keys := spreadKeys(t, s, c, 6)
	t0 := time.UnixMicro(1_700_000_000_000_000)
	const window = 10 * time.Second
	var reqs []core.Request
	for i, a := range core.Algorithms() {
		p := core.Policy{Name: "room", Algorithm: a, Limit: 10, Window: window}
		reqs = append(reqs, core.Request{Key: keys[i], Policy: p, Cost: 2, Now: t0})
	}
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: window}
	reqs = append(reqs, core.Request{Key: keys[5], Policy: tight, Cost: 1, Now: t0})
	out := make([]core.Decision, len(reqs))
	require.NoError(t, s.TakeAll(ctx, reqs, out))

	// The denied request, cost 3, at t0+1s; the other server takes 1 from
	// every room layer at t0+2s, after the decision, before the undo.
	for i := range reqs {
		reqs[i].Now = t0.Add(time.Second)
		if i < 5 {
			reqs[i].Cost = 3
		}
	}
	var interloper []error
	hook.arm(func() {
		for _, r := range reqs[:5] {
			r.Cost, r.Now = 1, t0.Add(2*time.Second)
			d, err := other.Take(ctx, r)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("%s: the other server's request denied", r.Policy.Algorithm)
			}
			interloper = append(interloper, err)
		}
	})
	require.NoError(t, s.TakeAll(ctx, reqs, out))
	require.Len(t, interloper, 5, "the other server decided between decision and undo")
	for _, err := range interloper {
		require.NoError(t, err)
	}
	assert.False(t, out[5].Allowed, "the tight layer denies")

	// What each room layer has left at t0+3s, for a request of cost 1.
	left := func(r core.Request, at time.Duration) int64 {
		r.Cost, r.Now = 1, t0.Add(at)
		d, err := other.Take(ctx, r)
		require.NoError(t, err)
		require.True(t, d.Allowed, "%s at %v", r.Policy.Algorithm, at)
		return d.Remaining
	}
	// twin is what a key that saw the costs given, at t0, t0+1s, t0+2s,
	// has left at t0+3s.
	twins := 0
	twin := func(r core.Request, costs ...int64) int64 {
		twins++
		r.Key += fmt.Sprintf("-twin%d", twins)
		for i, cost := range costs {
			if cost == 0 {
				continue
			}
			r.Cost, r.Now = cost, t0.Add(time.Duration(i)*time.Second)
			_, err := other.Take(ctx, r)
			require.NoError(t, err)
		}
		return left(r, 3*time.Second)
	}
	for _, r := range reqs[:5] {
		got := left(r, 3*time.Second)
		switch a := r.Policy.Algorithm; a {
		case core.FixedWindow, core.SlidingWindowCounter:
			// 2 at t0 and 1 at t0+2s taken; the 3 given back.
			assert.Equal(t, int64(10-2-1-1), got, "%s: the units given back", a)
		case core.SlidingWindowLog:
			// The member removed from inside the log: its units count
			// until the one before it leaves the window (at t0+10s),
			// never after.
			assert.Equal(t, int64(10-2-3-1-1), got, "%s: while the first member is in the window", a)
			assert.Equal(t, int64(10-1-1-1), left(r, window+500*time.Millisecond), "%s: once it has left", a)
		default:
			// A bucket keeps what the request took.
			assert.Equal(t, twin(r, 2, 3, 1), got, "%s: kept", a)
			assert.Less(t, got, twin(r, 2, 0, 1), "%s: kept", a)
		}
	}
}

// TestMultiClusterConformance runs storetest.RunLayers over a cluster.
func TestMultiClusterConformance(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := mustNew(t, cl.Client(), WithPrefix(testPrefix(t)))
	storetest.RunLayers(t, func(*testing.T) core.Store { return s })
}

// TestMultiClusterExactness races layered Limiters on three Stores over a
// cluster (storetest.RunLayersExactness): in the spread race the layers'
// keys are in many slots, decided in groups and undone, and no layer ever
// admits beyond its limit.
func TestMultiClusterExactness(t *testing.T) {
	cl := redistest.StartCluster(t)
	prefix := testPrefix(t)
	stores := make([]core.Store, 3)
	for i := range stores {
		stores[i] = mustNew(t, cl.Client(), WithPrefix(prefix))
	}
	// Warm up, so that no first decision passes the Limiters' timeout on
	// a loaded machine: every master has the scripts of the races (one
	// algorithm, one to four layers per slot) and answers.
	c := cl.Client()
	ctx := context.Background()
	require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		srcs := []string{undoLua}
		for i := range algos {
			for k := 1; k <= 4; k++ {
				vs := make([]int, k)
				for j := range vs {
					vs[j] = variant(i, false)
				}
				ls, err := scriptFor(vs)
				if err != nil {
					return err
				}
				srcs = append(srcs, ls.src)
			}
		}
		for _, src := range srcs {
			if err := n.ScriptLoad(ctx, src).Err(); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, s := range stores {
		require.NoError(t, s.(*Store).Ping(ctx))
	}
	storetest.RunLayersExactness(t, stores, 4)
	// Every key written has a TTL.
	all := scanKeys(t, ctx, c, prefix)
	require.NotEmpty(t, all)
	for _, k := range all {
		assert.Positive(t, c.PTTL(ctx, k).Val(), "%s: PTTL", k)
	}
}

// TestMultiRing: over a *redis.Ring of two servers, the layers are
// grouped by client key, each group on its shard; a denial by one undoes
// the others, and every state is left as it was.
func TestMultiRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	if a.External() {
		t.Skip("needs two local redis-servers")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	s := mustNew(t, ring, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	t0 := time.UnixMicro(1_700_000_000_000_000)
	var reqs []core.Request
	for i, alg := range core.Algorithms() {
		p := core.Policy{Name: "room", Algorithm: alg, Limit: 10, Window: 10 * time.Second}
		reqs = append(reqs, core.Request{Key: fmt.Sprintf("ring-%d", i), Policy: p, Cost: 2, Now: t0})
	}
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: 10 * time.Second}
	reqs = append(reqs, core.Request{Key: "ring-tight", Policy: tight, Cost: 1, Now: t0})
	out := make([]core.Decision, len(reqs))
	require.NoError(t, s.TakeAll(ctx, reqs, out))
	before := make([]string, len(reqs))
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "first request, layer %d", i)
		before[i] = snapshot(t, ring, s.stateKey(r.Key, r.Policy))
		require.NotEmpty(t, before[i])
	}
	for i := range reqs {
		reqs[i].Now = t0.Add(time.Second)
	}
	require.NoError(t, s.TakeAll(ctx, reqs, out))
	assert.False(t, out[5].Allowed, "the tight layer denies")
	for i, r := range reqs {
		k := s.stateKey(r.Key, r.Policy)
		assert.Equal(t, before[i], snapshot(t, ring, k), "%s: as it was", k)
	}
	// Both shards hold keys.
	assert.Positive(t, a.Client().DBSize(ctx).Val(), "shard a")
	assert.Positive(t, b.Client().DBSize(ctx).Val(), "shard b")
}
