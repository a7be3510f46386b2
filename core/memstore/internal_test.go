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
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func testStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s := New(append([]Option{WithCleanupInterval(time.Hour)}, opts...)...)
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
	d, err := s.Take(context.Background(), core.Request{Key: key, Policy: p, Cost: cost, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSweepReclaimsExpiredState(t *testing.T) {
	s := testStore(t, WithShards(4))
	// The state of each of these policies matters for one window (two for
	// the sliding counter) after its last admitted request at t0, at most.
	var ps []core.Policy
	for _, alg := range core.Algorithms() {
		ps = append(ps, core.Policy{Name: "p", Algorithm: alg, Limit: 10, Window: time.Minute})
	}
	const keys = 100
	for i := range keys {
		for _, p := range ps {
			mustTake(t, s, fmt.Sprint("k", i), p, 1, t0)
		}
	}
	if got, want := s.Len(), keys*len(ps); got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	s.sweep(t0.Add(time.Second))
	if got, want := s.Len(), keys*len(ps); got != want {
		t.Fatalf("after an early sweep: Len = %d, want %d (nothing expired yet)", got, want)
	}
	s.sweep(t0.Add(2*time.Minute + time.Microsecond))
	if got := s.Len(); got != 0 {
		t.Fatalf("after a late sweep: Len = %d, want 0", got)
	}
}

func TestSweepKeepsLiveState(t *testing.T) {
	s := testStore(t, WithShards(1))
	short := core.Policy{Name: "short", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}
	long := core.Policy{Name: "long", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour}
	mustTake(t, s, "a", short, 1, t0)
	mustTake(t, s, "a", long, 1, t0)
	s.sweep(t0.Add(time.Minute))
	if got := s.Len(); got != 1 {
		t.Fatalf("Len = %d, want 1", got)
	}
	if d := mustTake(t, s, "a", long, 1, t0.Add(time.Minute)); d.Allowed {
		t.Fatalf("live state was lost: got %+v, want denied", d)
	}
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
	if n := len(sh.t.slots); n < 4*shrinkMin {
		t.Fatalf("%d slots for %d keys", n, 4*shrinkMin+1)
	}
	s.sweep(t0.Add(time.Minute))
	if n := len(sh.t.slots); sh.n != 1 || sh.t.used != 1 || n != minSlots {
		t.Fatalf("after sweep: %d entries, %d of %d slots used, want 1, 1 of %d", sh.n, sh.t.used, n, minSlots)
	}
	if lookup(s, "kept", keep) == nil {
		t.Fatal("the live key was lost")
	}
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
		if s.Len() > evictSample {
			t.Fatalf("Len = %d above the cap %d", s.Len(), evictSample)
		}
		if lookup(s, "live", long) == nil {
			t.Fatalf("insert %d evicted the live key", i)
		}
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
		if got := lookup(s, fmt.Sprint("k", i), p) != nil; got == (i == 3) {
			t.Fatalf("k%d: held %v, want only k3, the soonest to expire, evicted", i, got)
		}
	}
	if s.Len() != evictSample {
		t.Fatalf("Len = %d, want %d", s.Len(), evictSample)
	}
}

func TestSlidingLogShrinks(t *testing.T) {
	s := testStore(t, WithShards(1))
	const n = 1000
	p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: n, Window: time.Second}
	for i := range n {
		if d := mustTake(t, s, "k", p, 1, t0.Add(time.Duration(i)*time.Microsecond)); !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	lg := lookup(s, "k", p).log
	if cap(lg.entries) < n {
		t.Fatalf("cap = %d, want >= %d", cap(lg.entries), n)
	}
	// All but the last two entries have left the window.
	now := t0.Add(time.Second + (n-3)*time.Microsecond)
	if d := mustTake(t, s, "k", p, 1, now); !d.Allowed || d.Remaining != n-3 {
		t.Fatalf("got %+v, want allowed with %d remaining", d, n-3)
	}
	if len(lg.entries) != 3 || lg.head != 0 || cap(lg.entries) > 16 {
		t.Fatalf("log len %d head %d cap %d, want len 3 and a small cap", len(lg.entries), lg.head, cap(lg.entries))
	}
}

func TestExpiredLogIsReusedAndShrunk(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: 500, Window: time.Second}
	for i := range 500 {
		mustTake(t, s, "k", p, 1, t0.Add(time.Duration(i)*time.Microsecond))
	}
	if d := mustTake(t, s, "k", p, 2, t0.Add(time.Hour)); !d.Allowed || d.Remaining != 498 {
		t.Fatalf("after expiry: got %+v, want allowed with 498 remaining", d)
	}
	lg := lookup(s, "k", p).log
	if len(lg.entries) != 1 || lg.head != 0 || cap(lg.entries) > 16 {
		t.Fatalf("log len %d head %d cap %d, want len 1 and a small cap", len(lg.entries), lg.head, cap(lg.entries))
	}
}

func TestCloseStopsJanitor(t *testing.T) {
	s := New()
	j := s.jan
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.done:
	default:
		t.Fatal("janitor still running after Close")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestJanitorSweeps(t *testing.T) {
	s := New()
	defer s.Close()
	// Replace the running janitor with a fast one, bypassing the clamp.
	s.jan.halt()
	<-s.jan.done
	s.jan = &janitor{stop: make(chan struct{}), done: make(chan struct{})}
	go s.jan.run(s.shards, s.clock, time.Millisecond)

	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}
	mustTake(t, s, "k", p, 1, time.Now().Add(-time.Hour))
	deadline := time.After(10 * time.Second)
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
	j := New().jan
	deadline := time.After(10 * time.Second)
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

func TestOptionsAreClamped(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	def := ceilPow2(max(64, 4*procs))
	tests := []struct {
		name            string
		opts            []Option
		shards, maxKeys int
		interval        time.Duration
	}{
		{"defaults", nil, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"nil option", []Option{nil}, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"shards rounded up", []Option{WithShards(100)}, 128, DefaultMaxKeys, DefaultCleanupInterval},
		{"one shard", []Option{WithShards(1)}, 1, DefaultMaxKeys, DefaultCleanupInterval},
		{"negative shards", []Option{WithShards(-3)}, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"too many shards", []Option{WithShards(1 << 40)}, MaxShards, DefaultMaxKeys, DefaultCleanupInterval},
		{"few keys", []Option{WithShards(64), WithMaxKeys(10)}, 8, 10, DefaultCleanupInterval},
		{"negative keys", []Option{WithMaxKeys(-1)}, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"zero keys", []Option{WithMaxKeys(0)}, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"many keys", []Option{WithMaxKeys(1 << 30)}, def, 1 << 30, DefaultCleanupInterval},
		{"short interval", []Option{WithCleanupInterval(time.Nanosecond)}, def, DefaultMaxKeys, MinCleanupInterval},
		{"negative interval", []Option{WithCleanupInterval(-time.Second)}, def, DefaultMaxKeys, DefaultCleanupInterval},
		{"long interval", []Option{WithCleanupInterval(time.Hour)}, def, DefaultMaxKeys, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConfig(tt.opts)
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
			if s.shards[i].max < 1 {
				t.Fatalf("maxKeys %d: shard %d holds no key", n, i)
			}
			sum += s.shards[i].max
		}
		if sum != n {
			t.Fatalf("maxKeys %d: shard caps sum to %d", n, sum)
		}
	}
}

func TestShardPadding(t *testing.T) {
	var sh shard
	if size := int(unsafe.Sizeof(sh)); size%128 != 0 {
		t.Fatalf("shard is %d bytes, not a multiple of 128", size)
	}
}

// TestClockNeverRunsBackwards decides one sliding-log key on the real clock
// from many goroutines: however they interleave between reading the clock
// and taking the lock, the log stays in time order.
func TestClockNeverRunsBackwards(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: core.MaxLogLimit, Window: time.Hour}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				if _, err := s.Take(context.Background(), core.Request{Key: "k", Policy: p, Cost: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	lg := lookup(s, "k", p).log
	if !slices.IsSortedFunc(lg.entries[lg.head:], func(a, b logEntry) int { return cmp.Compare(a.at, b.at) }) {
		t.Fatal("the log is out of time order")
	}
	// Explicit times are taken as they are, even before the shard's clock.
	past := core.Policy{Name: "past", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	then := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	mustTake(t, s, "k", past, 1, then)
	if d := mustTake(t, s, "k", past, 1, then.Add(time.Hour)); !d.Allowed {
		t.Fatalf("next window in the past: got %+v, want allowed", d)
	}
}

func TestClockFollowsWallClock(t *testing.T) {
	c := newClock()
	prev := c.now()
	for range 1000 {
		now := c.now()
		if now < prev {
			t.Fatalf("clock ran backwards: %d after %d", now, prev)
		}
		prev = now
	}
	if d := time.Now().UnixMicro() - c.now(); d < -1000 || d > 1000 {
		t.Fatalf("clock is %dµs off the wall clock", d)
	}
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
		req := core.Request{Cost: near(append(extremes, core.MaxLimit, core.MaxLogLimit, 10)...)}
		if r.IntN(8) > 0 {
			req.Key = "k"
		}
		req.Policy = core.Policy{
			Algorithm: core.Algorithms()[r.IntN(len(core.Algorithms()))],
			Limit:     near(append(extremes, core.MaxLimit, core.MaxLogLimit, 10)...),
			Burst:     near(append(extremes, core.MaxLimit, 20)...),
			Window:    time.Duration(near(append(extremes, int64(core.MinWindow), int64(core.MaxWindow))...)),
		}
		if r.IntN(2) == 0 {
			req.Policy.Burst = 0
		}
		capacity := req.Policy.Capacity()
		got, err := valid(&req, capacity), req.Validate()
		burstMisplaced := req.Policy.Burst != 0 && !req.Policy.Algorithm.IsBucket()
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
