package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// fourLayers returns four layered requests for one client, one per kind of
// layer a Limiter typically has: a global fixed window, a per-user token
// bucket with a lockout, a per-endpoint sliding log, and a per-address
// sliding counter, each on a key of its own, at now (zero: Redis TIME).
func fourLayers(key string, now time.Time) []core.Request {
	lo := time.Minute
	return []core.Request{
		{Key: "global", Policy: core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute}, Cost: 1},
		{Key: "user-" + key, Policy: core.Policy{Name: "user", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Lockout: lo}, Cost: 1},
		{Key: "endpoint-" + key, Policy: core.Policy{Name: "endpoint", Algorithm: core.SlidingWindowLog, Limit: 100, Window: time.Minute}, Cost: 1},
		{Key: "ip-" + key, Policy: core.Policy{Name: "ip", Algorithm: core.SlidingWindowCounter, Limit: 100, Window: time.Minute}, Cost: 1},
	}
}

// TestMultiScriptsLoad generates the script of every kind of layer, alone
// and with every other, and has Redis compile each (SCRIPT LOAD): the
// generated Lua is valid, and the script of a combination is generated
// once.
func TestMultiScriptsLoad(t *testing.T) {
	_, _, c := newStore(t)
	ctx := context.Background()
	n := 2 * len(algos)
	for a := range n {
		for b := range n {
			vs := []int{a, b, a}
			ls, err := scriptFor(vs)
			require.NoError(t, err)
			sha, err := c.ScriptLoad(ctx, ls.src).Result()
			require.NoError(t, err, "variants %v", vs)
			assert.Equal(t, ls.sha, sha, "variants %v", vs)
			again, err := scriptFor(vs)
			require.NoError(t, err)
			assert.Same(t, ls, again, "variants %v: cached", vs)
			// One function per kind of layer, three calls.
			assert.Equal(t, 3, strings.Count(ls.src, "\nr = layer_"), "variants %v", vs)
			if a != b {
				assert.Equal(t, 2, strings.Count(ls.src, "\nlocal function layer_"), "variants %v", vs)
			}
		}
	}
	// Distinct combinations, distinct codes.
	seen := map[uint64][]int{}
	for a := range n {
		for b := range n {
			for _, vs := range [][]int{{a}, {a, b}, {b, a, a}} {
				code := layersCode(vs)
				if prev, ok := seen[code]; ok && fmt.Sprint(prev) != fmt.Sprint(vs) {
					t.Fatalf("variants %v and %v share code %#x", prev, vs, code)
				}
				seen[code] = vs
			}
		}
	}
}

// TestMultiOneRoundTrip: four layers of four algorithms, one with a
// lockout, on four client keys are decided with one EVALSHA and nothing
// else, by TakeAll and by a layered Limiter, admitted or denied.
func TestMultiOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	h := newCommandCounter()
	c.AddHook(h)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	reqs := fourLayers("a", time.Time{})
	out := make([]core.Decision, len(reqs))
	require.NoError(t, errOf(takeN(s, ctx, time.Time{}, reqs, out))) // loads the script (NOSCRIPT, then EVAL)
	<-s.checked                                                      // New's check of the configuration is done: its commands are not counted
	h.reset()
	require.NoError(t, errOf(takeN(s, ctx, time.Time{}, reqs, out)))
	names, pipelines := h.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 1}, names, "commands of one layered decision")
	assert.Zero(t, pipelines, "pipelines")
	for i, d := range out {
		assert.True(t, d.Allowed, "layer %d", i)
		assert.Equal(t, limits.Capacity(reqs[i].Policy.Algorithm, reqs[i].Policy.Limit, reqs[i].Policy.Burst)-2, d.Remaining, "layer %d: remaining after two requests", i)
	}

	layers := make([]core.Policy, len(reqs))
	checks := make([]core.Request, len(reqs))
	for i, r := range reqs {
		p := r.Policy
		p.Name = ""
		layers[i] = limitertest.Named(p, r.Policy.Name)
		checks[i] = core.Request{Key: r.Key, Cost: 1}
	}
	l, err := core.NewLimiter(within(s, 5*time.Second), layers)
	require.NoError(t, err)
	var v limitertest.Verdict
	h.reset()
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v))
	names, pipelines = h.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 1}, names, "commands of AllowLayers")
	assert.Zero(t, pipelines, "pipelines")
	assert.True(t, v.Allowed)
	require.Len(t, v.Decisions, 4)
	assert.Equal(t, int64(97), v.Decisions[1].Remaining, "the user layer: three requests taken")

	// A denial: the endpoint layer's cost is more than it has left.
	checks[2].Cost = 98
	h.reset()
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v))
	names, _ = h.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 1}, names, "commands of a denied AllowLayers")
	assert.False(t, v.Allowed)
	assert.Equal(t, 2, v.Binding, "the endpoint layer denies")
}

// TestMultiDeniedWritesNothing: a layered request denied by one layer
// leaves the keys of every other layer byte for byte as they were (DUMP),
// their TTLs not longer; and the keys of a request admitted by every layer
// are all written.
func TestMultiDeniedWritesNothing(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	t0 := time.UnixMicro(1_700_000_000_000_000)
	for _, tight := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(tight), func(t *testing.T) {
			var reqs []core.Request
			for i, a := range limits.Algorithms[core.Algorithm]() {
				p := core.Policy{Name: fmt.Sprintf("room-%d", i), Algorithm: a, Limit: 100, Window: time.Minute}
				reqs = append(reqs, core.Request{Key: "k-" + string(tight), Policy: p, Cost: 2})
			}
			tp := core.Policy{Name: "tight", Algorithm: tight, Limit: 3, Window: time.Minute}
			reqs = append(reqs, core.Request{Key: "k-" + string(tight), Policy: tp, Cost: 2})
			out := make([]core.Decision, len(reqs))
			require.NoError(t, errOf(takeN(s, ctx, t0, reqs, out)))
			dumps := make([]string, len(reqs))
			ttls := make([]time.Duration, len(reqs))
			for i, r := range reqs {
				assert.True(t, out[i].Allowed, "first request, layer %d", i)
				k := s.stateKey(r.Key, r.Policy)
				dumps[i] = c.Dump(ctx, k).Val()
				require.NotEmpty(t, dumps[i], "%s: written", k)
				ttls[i] = c.PTTL(ctx, k).Val()
			}
			later := make([]core.Request, len(reqs))
			copy(later, reqs)
			require.NoError(t, errOf(takeN(s, ctx, t0.Add(time.Second), later, out)))
			for i, r := range reqs {
				k := s.stateKey(r.Key, r.Policy)
				if i == len(reqs)-1 {
					assert.False(t, out[i].Allowed, "the tight layer denies")
				} else {
					assert.True(t, out[i].Allowed, "layer %d admits alone", i)
				}
				assert.Equal(t, dumps[i], c.Dump(ctx, k).Val(), "%s: unchanged by the denied request", k)
				assert.LessOrEqual(t, c.PTTL(ctx, k).Val(), ttls[i], "%s: TTL", k)
			}
		})
	}
}

// TestMultiTTLs decides layered requests, admitted and denied, lockouts
// struck, at Redis TIME and at explicit times, then scans every key: each
// has a TTL, and none is longer than its state matters.
func TestMultiTTLs(t *testing.T) {
	s, _, c := newStore(t, withExplicitNowMinTTL(0))
	ctx := context.Background()
	const window = 10 * time.Second
	lo, loMemory := 2*time.Second, 20*time.Second
	var reqs []core.Request
	for i, a := range limits.Algorithms[core.Algorithm]() {
		reqs = append(reqs,
			core.Request{Key: fmt.Sprintf("k%d", i), Policy: core.Policy{Name: "plain", Algorithm: a, Limit: 5, Window: window}, Cost: 1},
			core.Request{Key: fmt.Sprintf("k%d", i), Policy: core.Policy{Name: "locked", Algorithm: a, Limit: 3, Window: window, Lockout: lo, LockoutMemory: loMemory}, Cost: 1})
	}
	out := make([]core.Decision, len(reqs))
	// The rounds must fall in one fixed window (windows start at
	// multiples of window, by Redis's clock and ours, one machine's), or
	// a fixed window layer crossing a boundary denies no request and
	// strikes no lockout: near the end of one, start at the next.
	if left := window - time.Duration(time.Now().UnixNano())%window; left < testwait.D(3*time.Second) {
		time.Sleep(left + 10*time.Millisecond)
	}
	denied := 0
	for round := range 6 {
		for _, explicit := range []bool{false, true} {
			own := append([]core.Request(nil), reqs...)
			for i := range own {
				if explicit {
					own[i].Key += "-x"
				}
			}
			require.NoError(t, errOf(takeN(s, ctx, time.Now(), own, out)), "round %d", round)
			for _, d := range out {
				if !d.Allowed {
					denied++
				}
			}
		}
	}
	assert.Positive(t, denied, "some layers denied")
	keys := scanKeys(t, ctx, c, s.prefix)
	locks := 0
	for _, k := range keys {
		ttl := c.PTTL(ctx, k).Val()
		assert.Positive(t, ttl, "%s: PTTL", k)
		limit := window + time.Second
		if strings.HasSuffix(k, ":swc2") {
			limit = 2*window + time.Second // the next window's end
		}
		if strings.HasSuffix(k, ":lock") {
			locks++
			limit = limits.LockoutMemory(lo, 0, loMemory) + time.Second
		}
		assert.LessOrEqual(t, ttl, limit, "%s: PTTL", k)
	}
	assert.Len(t, keys, 2*len(reqs)+2*len(limits.Algorithms[core.Algorithm]()), "a state key per request and client, a lock per locked one")
	assert.Equal(t, 2*len(limits.Algorithms[core.Algorithm]()), locks, "locks")
}

// TestMultiLockout: a lockout struck by a layered denial is kept, locks
// the layer's later requests (the others taking nothing), and a locked-out
// layer reports LockedOut.
func TestMultiLockout(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	t0 := time.UnixMicro(1_700_000_000_000_000)
	for _, a := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(a), func(t *testing.T) {
			room := core.Policy{Name: "room", Algorithm: core.FixedWindow, Limit: 100, Window: time.Hour}
			login := core.Policy{Name: "login", Algorithm: a, Limit: 1, Window: time.Minute, Lockout: 10 * time.Minute}
			reqs := func() []core.Request {
				return []core.Request{
					{Key: "u-" + string(a), Policy: room, Cost: 1},
					{Key: "u-" + string(a), Policy: login, Cost: 1},
				}
			}
			out := make([]core.Decision, 2)
			require.NoError(t, errOf(takeN(s, ctx, t0.Add(0), reqs(), out)))
			assert.True(t, out[0].Allowed && out[1].Allowed, "first")
			require.NoError(t, errOf(takeN(s, ctx, t0.Add(time.Second), reqs(), out)))
			assert.False(t, out[1].Allowed, "second: denied")
			assert.True(t, out[1].LockedOut, "second: starts the lockout")
			// Well after the window, the lockout still denies.
			require.NoError(t, errOf(takeN(s, ctx, t0.Add(5*time.Minute), reqs(), out)))
			assert.False(t, out[1].Allowed, "during the lockout")
			assert.True(t, out[1].LockedOut, "during the lockout")
			assert.Equal(t, 5*time.Minute+time.Second, out[1].RetryAfter, "the lockout's end")
			assert.True(t, out[0].Allowed, "the room layer admits alone")
			assert.Equal(t, int64(98), out[0].Remaining, "the room layer: what it would have left had it taken the request")
			room1 := make([]core.Decision, 1)
			require.NoError(t, errOf(takeN(s, ctx, t0.Add(5*time.Minute), reqs()[:1], room1)))
			assert.Equal(t, int64(98), room1[0].Remaining, "the room layer took only the first request, and this one")
		})
	}
}

// TestMultiBadInput: invalid input is an error before any round trip.
func TestMultiBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	h := newCommandCounter()
	c.AddHook(h)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	<-s.checked // New's check of the configuration is done: its commands are not counted
	h.reset()
	ctx := context.Background()
	good := fourLayers("a", time.Time{})
	bad := append([]core.Request(nil), good...)
	bad[2].Cost = -1
	_, err := takeN(s, ctx, time.Time{}, bad, make([]core.Decision, 4))
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	bad[2] = good[2]
	bad[3].Policy.Algorithm = "nope"
	assert.ErrorIs(t, errOf(takeN(s, ctx, time.Time{}, bad, make([]core.Decision, 4))), core.ErrInvalidOption)
	assert.ErrorIs(t, errOf(takeN(s, ctx, time.Time{}, good, make([]core.Decision, 3))), core.ErrInvalidOption)
	dup := append(good[:2:2], good[1])
	assert.ErrorIs(t, errOf(takeN(s, ctx, time.Time{}, dup, make([]core.Decision, 3))), core.ErrInvalidOption)
	names, pipelines := h.snapshot()
	assert.Empty(t, names, "commands")
	assert.Zero(t, pipelines)
	require.NoError(t, errOf(takeN(s, ctx, time.Time{}, nil, nil)), "no request: nothing to do")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, errOf(takeN(s, canceled, time.Time{}, good, make([]core.Decision, 4))), context.Canceled)
	names, _ = h.snapshot()
	assert.Empty(t, names, "commands after a canceled context")
}

// TestMultiFrozenRedis: while Redis is frozen (SIGSTOP), TakeAll over a
// client that honours context deadlines returns at its context's
// deadline, and a layered Limiter over the default client answers by its
// timeout from its FailMode.
func TestMultiFrozenRedis(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a local redis-server to freeze")
	}
	opts := srv.Options()
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	direct := redis.NewClient(opts)
	t.Cleanup(func() { _ = direct.Close() })
	sd := mustNew(t, direct, WithPrefix(testPrefix(t)))
	sb := mustNew(t, srv.Client(), WithPrefix(testPrefix(t)))
	ctx := context.Background()
	reqs := fourLayers("f", time.Time{})
	out := make([]core.Decision, len(reqs))
	// Warm up: connections dialled, scripts loaded.
	require.NoError(t, errOf(takeN(sd, ctx, time.Time{}, reqs, out)))
	require.NoError(t, errOf(takeN(sb, ctx, time.Time{}, reqs, out)))
	layers := make([]core.Policy, len(reqs))
	checks := make([]core.Request, len(reqs))
	for i, r := range reqs {
		p := r.Policy
		p.Name = ""
		layers[i] = limitertest.Named(p, r.Policy.Name, time.Second)
		checks[i] = core.Request{Key: r.Key, Cost: 1}
	}
	const timeout = 100 * time.Millisecond
	l, err := core.NewLimiter(within(sb, timeout), layers)
	require.NoError(t, err)

	srv.Freeze()
	defer srv.Thaw()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	_, err = takeN(sd, dctx, time.Time{}, reqs, out)
	took := time.Since(start)
	cancel()
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout"), "error: %v", err)
	assert.Less(t, took, timeout+testwait.D(time.Second), "TakeAll with a deadline, over a frozen Redis")

	var v limitertest.Verdict
	start = time.Now()
	err = limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v)
	took = time.Since(start)
	require.NoError(t, err)
	assert.ErrorIs(t, v.Err, limits.ErrStore)
	assert.False(t, v.Allowed, "fail closed")
	assert.Equal(t, core.SourceFailMode, v.Source)
	assert.Less(t, took, timeout+testwait.D(time.Second), "AllowLayers over a frozen Redis")
}

// TestMultiExactness races layered Limiters on four Stores over one Redis
// (storetest.RunConcurrent): every layer admits exactly, and charges
// exactly what was admitted.
func TestMultiExactness(t *testing.T) {
	srv := redistest.Start(t)
	prefix := testPrefix(t)
	stores := make([]core.Store, 4)
	for i := range stores {
		stores[i] = mustNew(t, srv.Client(), WithPrefix(prefix))
	}
	storetest.RunConcurrent(t, stores, 4)
}

// batchHook records, per command, whether it ran with the context of a
// batcher's call of a layered decision (TakeAllBy's).
type batchHook struct {
	mu      sync.Mutex
	batched int // commands run for a TakeAllBy call
	other   int
}

func (*batchHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *batchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := ctx.(*call)
		h.mu.Lock()
		if ok && c.multi != nil {
			h.batched++
		} else {
			h.other++
		}
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *batchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestMultiLimiterUsesTakeAllBy: a layered Limiter over a default
// *redis.Client decides through the Store's batcher (TakeAllBy, on a
// flusher, with the call as its context), with exactly one EVALSHA per
// decision, admitted or denied; and concurrent layered decisions are
// each one EVALSHA, in shared pipelines or not.
func TestMultiLimiterUsesTakeAllBy(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	counter, bh := newCommandCounter(), &batchHook{}
	c.AddHook(counter)
	c.AddHook(bh)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	reqs := fourLayers("by", time.Time{})
	layers := make([]core.Policy, len(reqs))
	checks := make([]core.Request, len(reqs))
	for i, r := range reqs {
		p := r.Policy
		p.Name = ""
		layers[i] = limitertest.Named(p, r.Policy.Name)
		checks[i] = core.Request{Key: r.Key, Cost: 1}
	}
	l, err := core.NewLimiter(within(s, 5*time.Second), layers)
	require.NoError(t, err)
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v)) // loads the script
	<-s.checked
	counter.reset()
	bh.mu.Lock()
	bh.batched, bh.other = 0, 0
	bh.mu.Unlock()
	for range 3 {
		require.NoError(t, limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v))
		assert.True(t, v.Allowed)
	}
	checks[2].Cost = 99 // more than the endpoint layer has left
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v))
	assert.False(t, v.Allowed)
	assert.Equal(t, 2, v.Binding)
	names, pipelines := counter.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 4}, names, "four layered decisions")
	assert.Zero(t, pipelines)
	bh.mu.Lock()
	assert.Equal(t, 4, bh.batched, "commands run by the batcher for TakeAllBy")
	assert.Zero(t, bh.other, "commands run otherwise")
	bh.mu.Unlock()
	assert.Equal(t, int64(96), v.Decisions[1].Remaining, "the user layer: four admissions, the denial took nothing")

	// Concurrent decisions: each admitted exactly once by the global
	// layer, whatever pipelines the flushers made of them.
	require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{{Key: "global", Cost: 1}, {}, {}, {Key: "ip-x", Cost: 1}}, time.Time{}, &v)) // loads this combination's script
	counter.reset()
	const workers, each = 8, 10
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for w := range workers {
		wg.Go(func() {
			own := []core.Request{{Key: "global", Cost: 1}, {}, {}, {Key: fmt.Sprintf("ip-%d", w), Cost: 1}}
			var v limitertest.Verdict
			for range each {
				if err := limitertest.AllowLayers(l, ctx, own, time.Time{}, &v); err == nil && v.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(workers*each), admitted.Load())
	names, pipelines = counter.snapshot()
	for name := range names {
		if name == "hello" || name == "client" {
			continue // a new pooled connection's handshake, not a decision
		}
		assert.Equal(t, "evalsha", name, "commands run alone")
	}
	assert.LessOrEqual(t, names["evalsha"]+pipelines, workers*each, "round trips: one per decision at most")
}

// TestMultiTakeAllByFrozenRedis: over a frozen Redis (SIGSTOP), TakeAllBy
// returns by its deadline over the default client (through the batcher)
// and over one that honours context deadlines, a later call too (its
// decision is never sent once its deadline passed), and answers again
// once Redis is thawed.
func TestMultiTakeAllByFrozenRedis(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a local redis-server to freeze")
	}
	opts := srv.Options()
	opts.ContextTimeoutEnabled = true
	direct := redis.NewClient(opts)
	t.Cleanup(func() { _ = direct.Close() })
	stores := map[string]*Store{
		"default": mustNew(t, srv.Client(), WithPrefix(testPrefix(t))),
		"direct":  mustNew(t, direct, WithPrefix(testPrefix(t))),
	}
	ctx := context.Background()
	reqs := fourLayers("fz", time.Time{})
	out := make([]core.Decision, len(reqs))
	for _, s := range stores {
		require.NoError(t, errOfN(s.takeAllUntil(ctx, time.Time{}, reqs, out, time.Now().Add(5*time.Second)))) // warm up
	}
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	const timeout = 100 * time.Millisecond
	for name, s := range stores {
		for i := range 2 {
			start := time.Now()
			_, err := s.takeAllUntil(ctx, time.Time{}, reqs, out, start.Add(timeout))
			took := time.Since(start)
			require.Error(t, err, "%s %d", name, i)
			assert.Less(t, took, timeout+testwait.D(500*time.Millisecond), "%s %d: TakeAllBy over a frozen Redis", name, i)
		}
		// A canceled caller stops waiting at once.
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		start := time.Now()
		_, err := s.takeAllUntil(cctx, time.Time{}, reqs, out, start.Add(time.Minute))
		assert.ErrorIs(t, err, context.Canceled, name)
		assert.Less(t, time.Since(start), testwait.D(10*time.Second), "%s: canceled", name)
	}
	srv.Thaw()
	thawed = true
	for name, s := range stores {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, errOfN(s.takeAllUntil(ctx, time.Time{}, reqs, out, time.Now().Add(time.Second))))
		}, testwait.D(10*time.Second), 10*time.Millisecond, "%s after the thaw", name)
		assert.True(t, out[0].Allowed, name)
	}
}

// TestMultiTakeAllByMatchesTakeAll: the same layered requests, at the same
// explicit times, get the same decisions from TakeAllBy as from TakeAll
// (on other keys), admitted and denied, locked out included, over a
// *redis.Client (the batcher) and a cluster client (TakeAll bounded).
func TestMultiTakeAllByMatchesTakeAll(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	clients := map[string]redis.UniversalClient{"client": srv.Client(), "cluster": cl.Client()}
	ctx := context.Background()
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			a := mustNew(t, c, WithPrefix(testPrefix(t)+"a:"))
			b := mustNew(t, c, WithPrefix(testPrefix(t)+"b:"))
			now := time.UnixMicro(1_700_000_000_000_000)
			denied := 0
			for i := range 60 {
				at := now.Add(time.Duration(i) * 700 * time.Millisecond)
				reqs := fourLayers("m", at)
				for j := range reqs {
					reqs[j].Policy.Limit = 10
					reqs[j].Cost = int64(1 + (i*(j+1))%4)
				}
				want := make([]core.Decision, len(reqs))
				got := make([]core.Decision, len(reqs))
				require.NoError(t, errOf(takeN(a, ctx, at, reqs, want)), "request %d", i)
				require.NoError(t, errOfN(b.takeAllUntil(ctx, at, reqs, got, time.Now().Add(5*time.Second))), "request %d", i)
				assert.Equal(t, want, got, "request %d", i)
				if !want[0].Allowed || !want[1].Allowed || !want[2].Allowed || !want[3].Allowed {
					denied++
				}
			}
			assert.Positive(t, denied, "some requests denied")
			assert.Less(t, denied, 60, "some admitted")
			// Bad input is TakeAll's error, without a round trip.
			_, err := b.takeAllUntil(ctx, now, fourLayers("m", now), make([]core.Decision, 3), time.Now().Add(time.Second))
			assert.ErrorIs(t, err, core.ErrInvalidOption)
		})
	}
}
