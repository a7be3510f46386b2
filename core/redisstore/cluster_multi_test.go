package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/storetest"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// spreadKeys returns n client keys whose state keys are in n distinct
// slots, spread over every master of c, and checks slot against CLUSTER
// KEYSLOT on the way.
func spreadKeys(t testing.TB, s *Store, c *redis.ClusterClient, n int) []string {
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

// afterSteps calls the functions armed, one after each of the steps
// (check, take) of the layered requests that follow arm: a Store's
// afterStep.
type afterSteps struct {
	mu sync.Mutex
	do []func()
}

func (h *afterSteps) step() {
	h.mu.Lock()
	var do func()
	if len(h.do) > 0 {
		do, h.do = h.do[0], h.do[1:]
	}
	h.mu.Unlock()
	if do != nil {
		do()
	}
}

func (h *afterSteps) arm(do ...func()) {
	h.mu.Lock()
	h.do = do
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
// sixth that denies: the check of each slot (one command each, sent at
// once) finds the denial, and no slot takes anything: every state is left
// as it was before the denied request, and its TTL kept.
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
	for i, a := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Name: "room", Algorithm: a, Limit: 10, Window: 10 * time.Second}
		reqs = append(reqs, core.Request{Key: keys[i], Policy: p, Cost: 2})
	}
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: 10 * time.Second}
	reqs = append(reqs, core.Request{Key: keys[5], Policy: tight, Cost: 1})
	out := make([]core.Decision, len(reqs))
	require.NoError(t, errOf(takeN(s, ctx, t0, reqs, out)))
	<-s.checked // New's check of the configuration is done: its commands are not counted
	before := make([]string, len(reqs))
	ttls := make([]time.Duration, len(reqs))
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "first request, layer %d", i)
		k := s.stateKey(r.Key, r.Policy)
		before[i], ttls[i] = snapshot(t, c, k), c.PTTL(ctx, k).Val()
	}

	counter.reset()
	require.NoError(t, errOf(takeN(s, ctx, t0.Add(time.Second), reqs, out)))
	names, pipelines := counter.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 6}, names, "the check of each of the six slots, and nothing taken nor undone")
	assert.Zero(t, pipelines)
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
		require.NoError(t, errOf(takeN(s, ctx, t0.Add(time.Second), []core.Request{r}, got)))
		assert.True(t, got[0].Allowed, "layer %d alone", i)
		if limits.IsBucket(r.Policy.Algorithm) {
			assert.GreaterOrEqual(t, got[0].Remaining, int64(6), "layer %d alone: remaining", i)
		} else {
			assert.Equal(t, int64(6), got[0].Remaining, "layer %d alone: remaining", i)
		}
	}
}

// TestMultiClusterUndoContended: a layered request over a Redis Cluster
// whose check admits, and that loses a race on one slot before it takes:
// another app server fills the tight layer between the check and the
// take, and takes from every other layer between the take and the undo.
// The undo gives back exactly the units the request took, in every
// algorithm: each layer is left as a twin key that never saw the request,
// whether the other server decided a second later or in the same
// microsecond (the log's member widened by it).
func TestMultiClusterUndoContended(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	hook := &afterSteps{}
	prefix := testPrefix(t)
	s := mustNew(t, c, WithPrefix(prefix))
	s.afterStep = hook.step
	other := mustNew(t, cl.Client(), WithPrefix(prefix)) // another app server
	ctx := context.Background()
	const window = 10 * time.Second
	keys := spreadKeys(t, s, c, 6)
	for _, later := range []time.Duration{time.Second, 0} {
		t.Run(fmt.Sprintf("other-%v-later", later), func(t *testing.T) {
			run := fmt.Sprintf("-%v", later)
			t0 := time.UnixMicro(1_700_000_000_000_000)
			var reqs []core.Request
			for i, a := range limits.Algorithms[core.Algorithm]() {
				p := core.Policy{Name: "room" + run, Algorithm: a, Limit: 10, Window: window}
				reqs = append(reqs, core.Request{Key: keys[i], Policy: p, Cost: 2})
			}
			tight := core.Policy{Name: "tight" + run, Algorithm: core.FixedWindow, Limit: 2, Window: window}
			reqs = append(reqs, core.Request{Key: keys[5], Policy: tight, Cost: 1})
			out := make([]core.Decision, len(reqs))
			require.NoError(t, errOf(takeN(s, ctx, t0, reqs, out)))
			for i := range out {
				require.True(t, out[i].Allowed, "first request, layer %d", i)
			}

			// The request, cost 3, at t0+1s.
			for i := range reqs {
				if i < 5 {
					reqs[i].Cost = 3
				}
			}
			var interloper []error
			take := func(r core.Request, at time.Time) {
				d, _, err := take1(other, ctx, at, r)
				if err == nil && !d.Allowed {
					err = fmt.Errorf("%s %s: the other server's request denied", r.Policy.Name, r.Policy.Algorithm)
				}
				interloper = append(interloper, err)
			}
			hook.arm(func() {
				// After the check: the tight layer's last unit.
				r := reqs[5]
				take(r, t0.Add(time.Second))
			}, func() {
				// After the take: 1 from every room layer.
				for _, r := range reqs[:5] {
					r.Cost = 1
					take(r, t0.Add(time.Second+later))
				}
			})
			require.NoError(t, errOf(takeN(s, ctx, t0.Add(time.Second), reqs, out)))
			require.Len(t, interloper, 6, "the other server decided between check and take, and between take and undo")
			for _, err := range interloper {
				require.NoError(t, err)
			}
			assert.False(t, out[5].Allowed, "the tight layer denies: its race is lost")

			// What each room layer has left at t0+3s, for a request of
			// cost 1, against a twin that saw the costs 2 at t0 and 1 at
			// t0+1s+later, and not this request's 3.
			left := func(r core.Request) int64 {
				r.Cost = 1
				d, _, err := take1(other, ctx, t0.Add(3*time.Second), r)
				require.NoError(t, err)
				require.True(t, d.Allowed, "%s", r.Policy.Algorithm)
				return d.Remaining
			}
			for _, r := range reqs[:5] {
				twin := r
				twin.Key += "-twin"
				for _, step := range []struct {
					cost int64
					at   time.Duration
				}{{2, 0}, {1, time.Second + later}} {
					twin.Cost = step.cost
					d, _, err := take1(other, ctx, t0.Add(step.at), twin)
					require.NoError(t, err)
					require.True(t, d.Allowed)
				}
				want := left(twin)
				assert.Equal(t, want, left(r), "%s: all 3 units given back", r.Policy.Algorithm)
				if !limits.IsBucket(r.Policy.Algorithm) {
					assert.Equal(t, int64(10-2-1-1), want, "%s: the twin", r.Policy.Algorithm)
				}
			}
		})
	}
}

// TestMultiClusterConformance runs storetest.Run over a cluster.
func TestMultiClusterConformance(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := mustNew(t, cl.Client(), WithPrefix(testPrefix(t)))
	storetest.Run(t, func(*testing.T) core.Store { return s })
}

// TestMultiClusterExactness races layered Limiters on three Stores over a
// cluster (storetest.RunConcurrent): in the spread race the layers'
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
		require.NoError(t, s.(*Store).CheckConfig(ctx))
	}
	storetest.RunConcurrent(t, stores, 4)
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
	for i, alg := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Name: "room", Algorithm: alg, Limit: 10, Window: 10 * time.Second}
		reqs = append(reqs, core.Request{Key: fmt.Sprintf("ring-%d", i), Policy: p, Cost: 2})
	}
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 1, Window: 10 * time.Second}
	reqs = append(reqs, core.Request{Key: "ring-tight", Policy: tight, Cost: 1})
	out := make([]core.Decision, len(reqs))
	require.NoError(t, errOf(takeN(s, ctx, t0, reqs, out)))
	before := make([]string, len(reqs))
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "first request, layer %d", i)
		before[i] = snapshot(t, ring, s.stateKey(r.Key, r.Policy))
		require.NotEmpty(t, before[i])
	}
	require.NoError(t, errOf(takeN(s, ctx, t0.Add(time.Second), reqs, out)))
	assert.False(t, out[5].Allowed, "the tight layer denies")
	for i, r := range reqs {
		k := s.stateKey(r.Key, r.Policy)
		assert.Equal(t, before[i], snapshot(t, ring, k), "%s: as it was", k)
	}
	// Both shards hold keys.
	assert.Positive(t, a.Client().DBSize(ctx).Val(), "shard a")
	assert.Positive(t, b.Client().DBSize(ctx).Val(), "shard b")
}

// TestMultiClusterDeniedFloodTakesNothing: the attack, at scale,
// over a real Redis Cluster with default ClusterClients. Two app servers
// (two Stores, two layered Limiters each) decide 3,000 mixed requests at
// once, all at one time: every request passes a global layer, a layer per
// user and an endpoint layer with room; a third of them are logins, which
// also pass a layer of 5 per address with a lockout, so that most logins
// are denied, and then locked out, on that layer alone; the users' layers
// (16 of 15) bind before the global one (300). The keys are in
// many slots. Afterwards every key of every layer has been charged
// exactly what it admitted: the denied logins took nothing from the
// global, user and endpoint layers.
func TestMultiClusterDeniedFloodTakesNothing(t *testing.T) {
	cl := redistest.StartCluster(t)
	prefix := testPrefix(t)
	ctx := context.Background()
	now := time.UnixMicro(1_700_000_000_000_000)
	const (
		attempts   = 3000
		goroutines = 64
		users      = 16
		addrs      = 8
	)
	type layerSpec struct {
		name  string
		limit int64
		keys  int
	}
	specs := []layerSpec{{"global", 300, 1}, {"user", 15, users}, {"endpoint", 100_000, 1}, {"login", 5, addrs}}
	keyOf := func(layer, attempt int) string {
		return fmt.Sprintf("%s-%d", specs[layer].name, attempt%specs[layer].keys)
	}
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			run := fmt.Sprintf("%s-%s-", prefix, alg)
			layers := make([]core.Policy, len(specs))
			for i, sp := range specs {
				p := core.Policy{Algorithm: alg, Limit: sp.limit, Window: time.Hour}
				if sp.name == "login" {
					p.Lockout = time.Minute
				}
				layers[i] = limitertest.Named(p, sp.name)
			}
			var limiters []*core.Limiter
			var stores []*Store
			for range 2 {
				s := mustNew(t, cl.Client(), WithPrefix(run))
				stores = append(stores, s)
				for range 2 {
					// Generous: this test is about what is charged, and a
					// busy machine must not turn a slow decision into an
					// error.
					l, err := core.NewLimiter(within(s, 10*time.Second), layers)
					require.NoError(t, err)
					limiters = append(limiters, l)
				}
			}
			admitted := make([][]atomic.Int64, len(specs))
			for i, sp := range specs {
				admitted[i] = make([]atomic.Int64, sp.keys)
			}
			var total, errs atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range goroutines {
				l := limiters[g%len(limiters)]
				wg.Go(func() {
					<-start
					v := limitertest.Verdict{Decisions: make([]core.Decision, 0, len(specs))}
					for a := g; a < attempts; a += goroutines {
						n := 3
						if a%3 == 0 {
							n = 4 // a login
						}
						checks := make([]core.Request, n)
						for i := range checks {
							checks[i] = core.Request{Key: keyOf(i, a), Cost: 1}
						}
						if err := limitertest.AllowLayers(l, ctx, checks, now, &v); err != nil {
							if errs.Add(1) == 1 {
								t.Errorf("AllowLayersAt: %v", err)
							}
							continue
						}
						if !v.Allowed {
							continue
						}
						total.Add(1)
						for i := range checks {
							admitted[i][a%specs[i].keys].Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			require.Zero(t, errs.Load())
			t.Logf("%d of %d admitted", total.Load(), attempts)
			require.Positive(t, total.Load())
			for i, sp := range specs {
				p := core.Policy{Name: sp.name, Algorithm: alg, Limit: sp.limit, Window: time.Hour}
				for k := range sp.keys {
					out := make([]core.Decision, 1)
					// The whole limit: denied, taking nothing, unless
					// nothing was charged.
					require.NoError(t, errOf(takeN(stores[1], ctx, now, []core.Request{{Key: keyOf(i, k), Policy: p, Cost: sp.limit}}, out)))
					charged := int64(0)
					if !out[0].Allowed {
						charged = sp.limit - out[0].Remaining
					}
					want := admitted[i][k].Load()
					assert.LessOrEqual(t, want, sp.limit+1, "layer %s, key %d: admitted past its limit", sp.name, k)
					assert.Equal(t, min(want, sp.limit), charged, "layer %s, key %d: charged, against admitted", sp.name, k)
				}
			}
		})
	}
}

// TestMultiClusterUndoAfterDeadline: a layered request over a Cluster
// whose check admits, and whose take then fails on a node that froze
// between the two steps, past the request's deadline, while the other
// nodes took. The other slots' units are given back all the same, once
// the request has returned: a slow node does not leave them taken until
// their windows pass.
func TestMultiClusterUndoAfterDeadline(t *testing.T) {
	cl := redistest.StartCluster(t)
	// A default client: it stops waiting at its read timeout (3 s), not at
	// the context's deadline, so that the nodes that took answer, and
	// their undo records arrive after the deadline. (A client that stops
	// at the deadline, ContextTimeoutEnabled, loses those replies: what
	// the other slots took cannot be told, and is kept.)
	c := cl.Client()
	hook := &afterSteps{}
	// The store's own timeout is generous: the deadline under test is ctx's.
	s := mustNew(t, c, WithPrefix(testPrefix(t)), WithTimeout(10*time.Second))
	s.afterStep = hook.step
	ctx := context.Background()
	keys := spreadKeys(t, s, c, 3) // on three masters
	t0 := time.UnixMicro(1_700_000_000_000_000)
	tight := core.Policy{Name: "tight", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}
	reqs := []core.Request{{Key: keys[0], Policy: tight, Cost: 1}}
	for i, a := range []core.Algorithm{core.SlidingWindowLog, core.TokenBucket} {
		p := core.Policy{Name: "room", Algorithm: a, Limit: 10, Window: time.Hour}
		reqs = append(reqs, core.Request{Key: keys[i+1], Policy: p, Cost: 2})
	}
	out := make([]core.Decision, len(reqs))
	require.NoError(t, errOf(takeN(s, ctx, t0, reqs, out)))
	// other reads the states; its slot map is loaded now, while every
	// node answers.
	other := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = other.Close() })
	before := make([]string, len(reqs))
	for i, r := range reqs {
		require.True(t, out[i].Allowed)
		before[i] = snapshot(t, other, s.stateKey(r.Key, r.Policy))
		require.NotEmpty(t, before[i])
	}
	m, err := c.MasterForKey(ctx, s.stateKey(keys[0], tight))
	require.NoError(t, err)
	var frozen *redistest.Server
	for _, n := range cl.Nodes() {
		if n.Addr() == m.Options().Addr {
			frozen = n
		}
	}
	require.NotNil(t, frozen, "the tight layer's master")
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			frozen.Thaw()
		}
	}
	t.Cleanup(thaw)

	hook.arm(frozen.Freeze) // after the check
	dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = takeN(s, dctx, t0.Add(time.Second), reqs, out)
	require.Error(t, err, "the frozen node's take")
	// The store gives up at ctx's deadline by a timer of its own, which
	// may fire a moment before dctx's: compare with the clock, not dctx.Err.
	dl, _ := dctx.Deadline()
	require.False(t, time.Now().Before(dl), "TakeAll returned before the deadline: %v", err)
	for i, r := range reqs[1:] {
		k := s.stateKey(r.Key, r.Policy)
		require.Eventually(t, func() bool { return snapshot(t, other, k) == before[i+1] }, testwait.D(10*time.Second), 10*time.Millisecond,
			"%s: given back after the deadline, the frozen node still frozen", r.Policy.Algorithm)
	}
	thaw()
}

// TestClusterTakeAbandonedWritesNothingOurs: over a cluster client (no
// batcher), a Take that gives up at its deadline leaves its call running
// on a goroutine of its own; it returns the error and no decision, and
// when the frozen node answers later, the abandoned call's take is applied
// by Redis and the store decides again. That call writes its decision
// where only it writes (it used to write the caller's variable: a data
// race -race reported in TestClusterFailover on a busy machine; this test
// runs the same path, though -race does not reliably catch it here).
func TestClusterTakeAbandonedWritesNothingOurs(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client() // a default client: it waits for the frozen node past the deadline
	s := mustNew(t, c, WithPrefix(testPrefix(t)), WithTimeout(10*time.Second))
	ctx := context.Background()
	p := core.Policy{Name: "abandoned", Algorithm: core.TokenBucket, Limit: 10, Window: time.Hour}
	req := core.Request{Key: "client", Policy: p, Cost: 1}
	d, _, err := take1(s, ctx, time.Time{}, req)
	require.NoError(t, err, "healthy: the slot map loads")
	require.True(t, d.Allowed)
	m, err := c.MasterForKey(ctx, s.stateKey(req.Key, p))
	require.NoError(t, err)
	var frozen *redistest.Server
	for _, n := range cl.Nodes() {
		if n.Addr() == m.Options().Addr {
			frozen = n
		}
	}
	require.NotNil(t, frozen, "the key's master")
	other := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = other.Close() })
	k := s.stateKey(req.Key, p)
	before := snapshot(t, other, k) // after one take, read while the node answers
	require.NotEmpty(t, before)
	frozen.Freeze()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			frozen.Thaw()
		}
	})
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	d, _, err = take1(s, dctx, time.Time{}, req)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the frozen node: given up at the deadline")
	assert.Equal(t, core.Decision{}, d, "no decision with the error")
	// Thawed, the node answers the abandoned call: another client watches
	// the state change.
	frozen.Thaw()
	thawed = true
	require.Eventually(t, func() bool {
		v := snapshot(t, other, k)
		return v != "" && v != before
	}, testwait.D(10*time.Second), time.Millisecond, "the abandoned take applied")
	after, _, err := take1(s, ctx, time.Time{}, req)
	require.NoError(t, err, "thawed: decides again")
	assert.Equal(t, int64(7), after.Remaining, "the abandoned take was applied by Redis (10 - 3)")
}
