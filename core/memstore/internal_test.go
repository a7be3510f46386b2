package memstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func testStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := New(append([]Option{WithCleanupInterval(time.Hour)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// lookup returns the state of key under p, or nil.
func lookup(s *Store, key string, p core.Policy) *state {
	h := s.hash(key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.find(h, key, p.Name, kindOf(p.Algorithm)); e != nil {
		return &e.st
	}
	return nil
}

func mustTake(t *testing.T, s *Store, key string, p core.Policy, cost int64, now time.Time) core.Decision {
	t.Helper()
	d, _, err := TakeOne(s, context.Background(), now, core.Request{Key: key, Policy: p, Cost: cost})
	require.NoError(t, err, "Take(%q, %s, %d)", key, p.Algorithm, cost)
	return d
}

func TestSweepReclaimsExpiredState(t *testing.T) {
	s := testStore(t, WithShards(4))
	// The state of each of these policies matters for one window (two for
	// the sliding counter) after its last admitted request at t0, at most.
	var ps []core.Policy
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		ps = append(ps, core.Policy{Name: "p", Algorithm: alg, Limit: 10, Window: time.Minute})
	}
	const keys = 100
	for i := range keys {
		for _, p := range ps {
			mustTake(t, s, fmt.Sprint("k", i), p, 1, t0)
		}
	}
	require.Equal(t, keys*len(ps), s.Len(), "Len")
	s.sweep(t0.Add(time.Second))
	require.Equal(t, keys*len(ps), s.Len(), "Len after an early sweep (nothing expired yet)")
	s.sweep(t0.Add(2*time.Minute + time.Microsecond))
	require.Zero(t, s.Len(), "Len after a late sweep")
}

func TestSweepKeepsLiveState(t *testing.T) {
	s := testStore(t, WithShards(1))
	short := core.Policy{Name: "short", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}
	long := core.Policy{Name: "long", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour}
	mustTake(t, s, "a", short, 1, t0)
	mustTake(t, s, "a", long, 1, t0)
	s.sweep(t0.Add(time.Minute))
	require.Equal(t, 1, s.Len(), "Len")
	require.False(t, mustTake(t, s, "a", long, 1, t0.Add(time.Minute)).Allowed, "live state was lost: Allowed")
}

func TestSweepShrinksTable(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}
	for i := range 4 * shrinkMin {
		mustTake(t, s, fmt.Sprint("k", i), p, 1, t0)
	}
	keep := core.Policy{Name: "keep", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	mustTake(t, s, "kept", keep, 1, t0)
	sh := &s.shards[0]
	require.GreaterOrEqual(t, len(sh.t.slots), 4*shrinkMin, "slots for %d keys", 4*shrinkMin+1)
	s.sweep(t0.Add(time.Minute))
	assert.Equal(t, 1, sh.n, "entries after the sweep")
	assert.Equal(t, 1, sh.t.used, "slots used after the sweep")
	assert.Equal(t, minSlots, len(sh.t.slots), "slots after the sweep")
	assert.NotNil(t, lookup(s, "kept", keep), "the live key was lost")
}

// TestEvictionPrefersExpired fills a one-shard store whose cap is the
// eviction sample, so that every eviction sees every key.
func TestEvictionPrefersExpired(t *testing.T) {
	s := testStore(t, WithShards(1), WithMaxKeys(evictSample))
	short := core.Policy{Name: "short", Algorithm: core.FixedWindow, Limit: 5, Window: time.Second}
	long := core.Policy{Name: "long", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}
	mustTake(t, s, "live", long, 1, t0)
	for i := range evictSample - 1 {
		mustTake(t, s, fmt.Sprint("old", i), short, 1, t0)
	}
	// At t0+10s every short key has expired; inserting new keys evicts
	// them first, and then new keys, which expire before the live one.
	now := t0.Add(10 * time.Second)
	for i := range 3 * evictSample {
		mustTake(t, s, fmt.Sprint("new", i), short, 1, now)
		require.LessOrEqual(t, s.Len(), evictSample, "Len after insert %d", i)
		require.NotNil(t, lookup(s, "live", long), "insert %d evicted the live key", i)
	}
}

func TestEvictionTakesSoonestExpiring(t *testing.T) {
	s := testStore(t, WithShards(1), WithMaxKeys(evictSample))
	for i := range evictSample {
		// Key i's window is i+10 minutes long, except key 3's: 30s. At
		// a whole hour, key 3 expires first.
		w := time.Duration(i+10) * time.Minute
		if i == 3 {
			w = 30 * time.Second
		}
		p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 5, Window: w}
		mustTake(t, s, fmt.Sprint("k", i), p, 1, t0.Truncate(time.Hour))
	}
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}
	mustTake(t, s, "newcomer", p, 1, t0.Truncate(time.Hour))
	for i := range evictSample {
		held := lookup(s, fmt.Sprint("k", i), p) != nil
		assert.Equal(t, i != 3, held, "k%d held (only k3, the soonest to expire, is evicted)", i)
	}
	assert.Equal(t, evictSample, s.Len(), "Len")
}

func TestSlidingLogShrinks(t *testing.T) {
	s := testStore(t, WithShards(1))
	const n = 1000
	p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: n, Window: time.Second}
	for i := range n {
		require.True(t, mustTake(t, s, "k", p, 1, t0.Add(time.Duration(i)*time.Microsecond)).Allowed, "request %d: Allowed", i)
	}
	lg := lookup(s, "k", p).log
	require.GreaterOrEqual(t, cap(lg.entries), n, "cap of the log")
	// All but the last two entries have left the window.
	now := t0.Add(time.Second + (n-3)*time.Microsecond)
	d := mustTake(t, s, "k", p, 1, now)
	require.True(t, d.Allowed, "Allowed")
	require.Equal(t, int64(n-3), d.Remaining, "Remaining")
	assert.Len(t, lg.entries, 3, "log entries")
	assert.Zero(t, lg.head, "log head")
	assert.LessOrEqual(t, cap(lg.entries), 16, "cap of the shrunk log")
}

func TestExpiredLogIsReusedAndShrunk(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: 500, Window: time.Second}
	for i := range 500 {
		mustTake(t, s, "k", p, 1, t0.Add(time.Duration(i)*time.Microsecond))
	}
	d := mustTake(t, s, "k", p, 2, t0.Add(time.Hour))
	require.True(t, d.Allowed, "after expiry: Allowed")
	require.Equal(t, int64(498), d.Remaining, "after expiry: Remaining")
	lg := lookup(s, "k", p).log
	assert.Len(t, lg.entries, 1, "log entries")
	assert.Zero(t, lg.head, "log head")
	assert.LessOrEqual(t, cap(lg.entries), 16, "cap of the reused log")
}

func TestCloseStopsJanitor(t *testing.T) {
	s := testStore(t)
	j := s.jan
	require.NoError(t, s.Close())
	select {
	case <-j.done:
	default:
		t.Fatal("janitor still running after Close")
	}
	require.NoError(t, s.Close(), "second Close")
}

func TestJanitorSweeps(t *testing.T) {
	s := testStore(t)
	// Replace the running janitor with a fast one, below
	// MinCleanupInterval.
	s.jan.halt()
	<-s.jan.done
	s.jan = &janitor{stop: make(chan struct{}), done: make(chan struct{})}
	go s.jan.run(s.shards, s.clock, time.Millisecond)

	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}
	mustTake(t, s, "k", p, 1, time.Now().Add(-time.Hour))
	deadline := time.After(testwait.D(10 * time.Second))
	for s.Len() != 0 {
		select {
		case <-deadline:
			t.Fatal("the janitor did not reclaim expired state")
		default:
			runtime.Gosched()
		}
	}
}

func TestDroppedStoreStopsJanitor(t *testing.T) {
	// The Store is reachable only within the function.
	j := func() *janitor {
		s, err := New()
		require.NoError(t, err)
		return s.jan
	}()
	deadline := time.After(testwait.D(10 * time.Second))
	for {
		runtime.GC()
		select {
		case <-j.done:
			return
		case <-deadline:
			t.Fatal("the janitor of an unreachable Store is still running")
		case <-time.After(time.Millisecond):
		}
	}
}

func TestOptions(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	def := min(ceilPow2(max(64, 4*procs)), MaxShards)
	tests := []struct {
		name            string
		opts            []Option
		shards, maxKeys int
		interval        time.Duration
	}{
		{"defaults", nil, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"shards rounded up", []Option{WithShards(100)}, 128, DefaultMaxKeys, DefaultCleanupInterval},
		{"one shard", []Option{WithShards(1)}, 1, DefaultMaxKeys, DefaultCleanupInterval},
		{"most shards", []Option{WithShards(MaxShards)}, MaxShards, DefaultMaxKeys, DefaultCleanupInterval},
		{"shards up to the key bound", []Option{WithShards(10), WithMaxKeys(10)}, 8, 10, DefaultCleanupInterval},
		{"shards as many as keys", []Option{WithShards(16), WithMaxKeys(16)}, 16, 16, DefaultCleanupInterval},
		{"default shards above the key bound", []Option{WithMaxKeys(10)}, 8, 10, DefaultCleanupInterval},
		{"one key", []Option{WithMaxKeys(1)}, 1, 1, DefaultCleanupInterval},
		{"many keys", []Option{WithMaxKeys(1 << 30)}, def, 1 << 30, DefaultCleanupInterval},
		{"shortest interval", []Option{WithCleanupInterval(MinCleanupInterval)}, def, DefaultMaxKeys, MinCleanupInterval},
		{"long interval", []Option{WithCleanupInterval(time.Hour)}, def, DefaultMaxKeys, time.Hour},
		{"last one wins", []Option{WithMaxKeys(5), WithMaxKeys(500)}, def, 500, DefaultCleanupInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := newConfig(tt.opts)
			require.NoError(t, err)
			assert.Equal(t, tt.shards, c.shards, "shards")
			assert.Equal(t, tt.maxKeys, c.maxKeys, "maxKeys")
			assert.Equal(t, tt.interval, c.interval, "interval")
		})
	}
}

func TestMaxKeysSplitsExactly(t *testing.T) {
	for _, n := range []int{1, 7, 64, 100, 1000, 12345} {
		s := testStore(t, WithMaxKeys(n))
		sum := 0
		for i := range s.shards {
			require.Positive(t, s.shards[i].max, "maxKeys %d: cap of shard %d", n, i)
			sum += s.shards[i].max
		}
		assert.Equal(t, n, sum, "maxKeys %d: sum of the shard caps", n)
	}
}

func TestShardPadding(t *testing.T) {
	var sh shard
	assert.Zero(t, unsafe.Sizeof(sh)%128, "shard is %d bytes, not a multiple of 128", unsafe.Sizeof(sh))
}

// TestClockNeverRunsBackwards decides one sliding-log key on the real clock
// from many goroutines: however they interleave between reading the clock
// and taking the lock, the log stays in time order.
func TestClockNeverRunsBackwards(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: limits.MaxLogLimit, Window: time.Hour}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				if _, _, err := TakeOne(s, context.Background(), time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1}); !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	lg := lookup(s, "k", p).log
	require.True(t, slices.IsSortedFunc(lg.entries[lg.head:], func(a, b logEntry) int { return cmp.Compare(a.at, b.at) }),
		"the log is out of time order")
	// Explicit times are taken as they are, even before the shard's clock.
	past := core.Policy{Name: "past", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	then := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	mustTake(t, s, "k", past, 1, then)
	assert.True(t, mustTake(t, s, "k", past, 1, then.Add(time.Hour)).Allowed, "next window in the past: Allowed")
}

func TestClockFollowsWallClock(t *testing.T) {
	c := newClock()
	prev := c.now()
	for range 1000 {
		now := c.now()
		require.GreaterOrEqual(t, now, prev, "the clock ran backwards")
		prev = now
	}
	assert.InDelta(t, time.Now().UnixMicro(), c.now(), 1000, "µs off the wall clock")
}

// TestValidAgreesWithValidate compares the inlined fast path with
// core.Request.Validate, on random requests near and beyond every bound:
// they must agree on every request whose name and burst Validate accepts,
// and valid must never refuse one that Validate accepts.
func TestValidAgreesWithValidate(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	near := func(bounds ...int64) int64 {
		switch b := bounds[r.IntN(len(bounds))]; r.IntN(4) {
		case 0:
			return b - 1
		case 1:
			return b + 1
		default:
			return b
		}
	}
	extremes := []int64{math.MinInt64, -1, 0, 1, math.MaxInt64}
	for range 200_000 {
		req := core.Request{Cost: near(append(extremes, limits.MaxLimit, limits.MaxLogLimit, 10)...)}
		if r.IntN(8) > 0 {
			req.Key = "k"
		}
		req.Policy = core.Policy{
			Algorithm: limits.Algorithms[core.Algorithm]()[r.IntN(len(limits.Algorithms[core.Algorithm]()))],
			Limit:     near(append(extremes, limits.MaxLimit, limits.MaxLogLimit, 10)...),
			Burst:     near(append(extremes, limits.MaxLimit, 20)...),
			Window:    time.Duration(near(append(extremes, int64(limits.MinWindow), int64(limits.MaxWindow))...)),
		}
		if r.IntN(2) == 0 {
			req.Policy.Burst = 0
		}
		capacity := limits.Capacity(req.Policy.Algorithm, req.Policy.Limit, req.Policy.Burst)
		got, err := valid(&req, capacity), req.Validate()
		burstMisplaced := req.Policy.Burst != 0 && !limits.IsBucket(req.Policy.Algorithm)
		if !got && err == nil || got && err != nil && !burstMisplaced {
			t.Fatalf("%+v: valid = %v, Validate says %v", req, got, err)
		}
		if !got && invalid(&req) == nil {
			t.Fatalf("%+v: refused without an error", req)
		}
	}
}

// TestDefaultCap checks that a Store built without options is bounded, at
// DefaultMaxKeys.
func TestDefaultCap(t *testing.T) {
	s := testStore(t)
	sum := 0
	for i := range s.shards {
		require.Positive(t, s.shards[i].max, "shard %d", i)
		sum += s.shards[i].max
	}
	assert.Equal(t, DefaultMaxKeys, sum)
}

// TestEvictionWeighsWhatStateHoldsBack fills a one-shard store whose cap is
// the eviction sample, so that every eviction sees every key: a newcomer
// evicts the state that holds back the least of its quota, and among
// equals the one admitted last, never the client at its limit.
func TestEvictionWeighsWhatStateHoldsBack(t *testing.T) {
	s := testStore(t, WithShards(1), WithMaxKeys(evictSample))
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}
	at := func(us int) time.Time { return t0.Truncate(time.Hour).Add(time.Duration(us) * time.Microsecond) }
	mustTake(t, s, "locked", p, 5, at(0))
	mustTake(t, s, "two", p, 2, at(1))
	for i := range evictSample - 2 {
		mustTake(t, s, fmt.Sprint("one-", i), p, 1, at(10+i))
	}
	newest := fmt.Sprint("one-", evictSample-3)
	mustTake(t, s, "newcomer", p, 1, at(100))
	assert.Nil(t, lookup(s, newest, p), "the newest of the cheapest states was kept")
	for _, k := range []string{"locked", "two", "one-0", "newcomer"} {
		assert.NotNil(t, lookup(s, k, p), "%s was evicted", k)
	}
	// However many newcomers come, the lockout and the state of 2 stay.
	for i := range 10 * evictSample {
		mustTake(t, s, fmt.Sprint("flood-", i), p, 1, at(200+i))
		require.NotNil(t, lookup(s, "locked", p), "flood key %d evicted the lockout", i)
		require.NotNil(t, lookup(s, "two", p), "flood key %d evicted the state of 2", i)
	}
	assert.Equal(t, evictSample, s.Len())
}

// TestWorth checks the worth of a state, by which eviction chooses: the
// share of its capacity it holds back. A bucket's debt drains linearly to
// nothing at its expiry; a fixed window's count holds until the state
// expires; the sliding counter's count weighs less as the window slides.
func TestWorth(t *testing.T) {
	s := testStore(t)
	w := time.Hour
	policy := func(alg core.Algorithm) core.Policy {
		return core.Policy{Name: "p", Algorithm: alg, Limit: 4, Window: w}
	}
	start := t0.Truncate(w)
	mustTake(t, s, "k", policy(core.TokenBucket), 4, start)
	mustTake(t, s, "k", policy(core.FixedWindow), 1, start)
	mustTake(t, s, "k", policy(core.SlidingWindowCounter), 2, start)
	mustTake(t, s, "k", policy(core.SlidingWindowLog), 3, start)
	for _, tc := range []struct {
		alg   core.Algorithm
		after time.Duration
		want  float64
	}{
		{core.TokenBucket, 0, 1},
		{core.TokenBucket, w / 4, 0.75},
		{core.TokenBucket, w / 2, 0.5},
		{core.TokenBucket, w, 0},
		{core.FixedWindow, 0, 0.25},
		{core.FixedWindow, w / 2, 0.25},
		{core.SlidingWindowCounter, 0, 0.5},
		{core.SlidingWindowCounter, w / 2, 0.5},
		{core.SlidingWindowCounter, w, 0.5},
		{core.SlidingWindowCounter, w + w/2, 0.25},
		{core.SlidingWindowLog, w / 2, 0.75},
	} {
		st := lookup(s, "k", policy(tc.alg))
		require.NotNil(t, st)
		assert.InDelta(t, tc.want, st.worth(start.Add(tc.after).UnixMicro()), 1e-6, "%s after %v", tc.alg, tc.after)
	}
}
