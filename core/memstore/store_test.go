package memstore_test

import (
	"context"
	"fmt"
	"sync"
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

// t0 is the fixed time of the explicit-clock tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// mustNew returns a Store built with opts, closed at the end of the test.
func mustNew(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newStore returns a Store closed at the end of the test. Its janitor runs
// every hour, so that it never sweeps the explicit-clock state of a test.
func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	return mustNew(t, append([]memstore.Option{memstore.WithCleanupInterval(time.Hour)}, opts...)...)
}

// policies has one policy of limit 3 per algorithm.
func policies() []core.Policy {
	var ps []core.Policy
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		ps = append(ps, core.Policy{Name: "p-" + string(alg), Algorithm: alg, Limit: 3, Window: time.Minute})
	}
	return ps
}

func take(t *testing.T, s core.Store, key string, p core.Policy, cost int64, now time.Time) core.Decision {
	t.Helper()
	d, _, err := storecall.Take(s, context.Background(), now, core.Request{Key: key, Policy: p, Cost: cost})
	require.NoError(t, err, "Take(%q, %s, %d)", key, p.Algorithm, cost)
	return d
}

// TestInvalidOptions checks that New refuses every value out of the range
// its option documents, and a nil option, with core.ErrInvalidOption.
func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []memstore.Option
	}{
		{"nil option", []memstore.Option{nil}},
		{"nil after a good one", []memstore.Option{memstore.WithMaxKeys(10), nil}},
		{"zero shards", []memstore.Option{memstore.WithShards(0)}},
		{"negative shards", []memstore.Option{memstore.WithShards(-3)}},
		{"too many shards", []memstore.Option{memstore.WithShards(memstore.MaxShards + 1)}},
		{"far too many shards", []memstore.Option{memstore.WithShards(1 << 40)}},
		{"more shards than keys", []memstore.Option{memstore.WithShards(64), memstore.WithMaxKeys(10)}},
		{"more shards than keys, keys first", []memstore.Option{memstore.WithMaxKeys(10), memstore.WithShards(64)}},
		{"zero keys", []memstore.Option{memstore.WithMaxKeys(0)}},
		{"negative keys", []memstore.Option{memstore.WithMaxKeys(-1)}},
		{"zero interval", []memstore.Option{memstore.WithCleanupInterval(0)}},
		{"negative interval", []memstore.Option{memstore.WithCleanupInterval(-time.Second)}},
		{"interval too short", []memstore.Option{memstore.WithCleanupInterval(memstore.MinCleanupInterval - time.Nanosecond)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := memstore.New(tt.opts...)
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.Nil(t, s, "a Store besides the error")
		})
	}
}

func TestTakeExhaustsThenDenies(t *testing.T) {
	for _, p := range policies() {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			s := newStore(t)
			for i := range 3 {
				d := take(t, s, "k", p, 1, t0)
				require.True(t, d.Allowed, "request %d: Allowed", i)
				require.Equal(t, int64(2-i), d.Remaining, "request %d: Remaining", i)
				require.Equal(t, int64(3), d.Limit, "request %d: Limit", i)
			}
			d := take(t, s, "k", p, 1, t0)
			require.False(t, d.Allowed, "4th request: Allowed")
			require.Zero(t, d.Remaining, "4th request: Remaining")
			require.Positive(t, d.RetryAfter, "4th request: RetryAfter")
			// A later request passes once the state has expired, and
			// finds a whole quota: expired state decides like none.
			d = take(t, s, "k", p, 1, t0.Add(time.Hour))
			require.True(t, d.Allowed, "after expiry: Allowed")
			require.Equal(t, int64(2), d.Remaining, "after expiry: Remaining")
		})
	}
}

func TestDeniedRequestsChangeNothing(t *testing.T) {
	for _, p := range policies() {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			s := newStore(t)
			take(t, s, "k", p, 3, t0)
			first := take(t, s, "k", p, 1, t0.Add(time.Millisecond))
			for i := range 5 {
				require.Equal(t, first, take(t, s, "k", p, 1, t0.Add(time.Millisecond)), "repeated denied request %d", i)
			}
			assert.Equal(t, 1, s.Len(), "Len")
		})
	}
}

func TestReset(t *testing.T) {
	for _, p := range policies() {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			s := newStore(t)
			other := p
			other.Name += "-other"
			take(t, s, "k", p, 3, t0)
			take(t, s, "k2", p, 3, t0)
			take(t, s, "k", other, 3, t0)
			require.False(t, take(t, s, "k", p, 1, t0).Allowed, "before Reset: Allowed")
			require.NoError(t, s.Reset(context.Background(), "k", p))
			d := take(t, s, "k", p, 1, t0)
			require.True(t, d.Allowed, "after Reset: Allowed")
			require.Equal(t, int64(2), d.Remaining, "after Reset: Remaining")
			// Other keys and other policies keep their state.
			assert.False(t, take(t, s, "k2", p, 1, t0).Allowed, "other key after Reset: Allowed")
			assert.False(t, take(t, s, "k", other, 1, t0).Allowed, "other policy after Reset: Allowed")
			// Resetting an unknown key is fine.
			require.NoError(t, s.Reset(context.Background(), "nobody", p), "Reset of an unknown key")
		})
	}
}

func TestPoliciesDoNotShareState(t *testing.T) {
	s := newStore(t)
	a := core.Policy{Name: "same", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	b := a
	b.Algorithm = core.TokenBucket
	take(t, s, "k", a, 1, t0)
	assert.True(t, take(t, s, "k", b, 1, t0).Allowed, "same name, other algorithm: Allowed")
	assert.Equal(t, 2, s.Len(), "Len")
}

func TestInvalidRequests(t *testing.T) {
	good := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 3, Window: time.Second}
	with := func(f func(*core.Request)) core.Request {
		r := core.Request{Key: "k", Policy: good, Cost: 1}
		f(&r)
		return r
	}
	tests := []struct {
		name string
		req  core.Request
		want error
	}{
		{"empty key", with(func(r *core.Request) { r.Key = "" }), core.ErrInvalidOption},
		{"unknown algorithm", with(func(r *core.Request) { r.Policy.Algorithm = "gcra" }), core.ErrInvalidOption},
		{"zero limit", with(func(r *core.Request) { r.Policy.Limit = 0 }), core.ErrInvalidOption},
		{"zero window", with(func(r *core.Request) { r.Policy.Window = 0 }), core.ErrInvalidOption},
		{"negative burst", with(func(r *core.Request) { r.Policy.Burst = -1 }), core.ErrInvalidOption},
		{"huge log", with(func(r *core.Request) {
			r.Policy.Algorithm, r.Policy.Limit = core.SlidingWindowLog, limits.MaxLogLimit+1
		}), core.ErrInvalidOption},
		{"zero cost", with(func(r *core.Request) { r.Cost = 0 }), core.ErrInvalidOption},
		{"negative cost", with(func(r *core.Request) { r.Cost = -1 }), core.ErrInvalidOption},
		{"cost above capacity", with(func(r *core.Request) { r.Cost = 4 }), core.ErrInvalidOption},
	}
	s := newStore(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := memstore.TakeOne(s, context.Background(), time.Time{}, tt.req)
			require.ErrorIs(t, err, tt.want)
		})
	}
	assert.Zero(t, s.Len(), "Len after invalid requests")
}

func TestZeroStoreFailsWithoutPanic(t *testing.T) {
	var s memstore.Store
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}
	_, _, err := memstore.TakeOne(&s, context.Background(), time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
	require.Error(t, err, "Take on the zero Store")
	require.Error(t, s.Reset(context.Background(), "k", p), "Reset on the zero Store")
	require.NoError(t, s.Close(), "Close on the zero Store")
}

func TestKeyCapHolds(t *testing.T) {
	for _, shards := range []int{1, 4, 64} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			const maxKeys = 100
			s := newStore(t, memstore.WithMaxKeys(maxKeys), memstore.WithShards(shards))
			p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Hour}
			for i := range 10 * maxKeys {
				take(t, s, fmt.Sprintf("client-%d", i), p, 1, t0.Add(time.Duration(i)*time.Microsecond))
				require.LessOrEqual(t, s.Len(), maxKeys, "Len after %d inserts", i+1)
			}
			assert.GreaterOrEqual(t, s.Len(), maxKeys/2, "Len: the cap is badly underused")
		})
	}
}

// TestConcurrent hammers many keys from many goroutines, with sweeps,
// resets and Len on the side: run it with -race. Each key must admit
// exactly its limit within one fixed window.
func TestConcurrent(t *testing.T) {
	const (
		goroutines = 32
		keys       = 500
		limit      = 20
		tries      = 2 // per goroutine and key: 64 tries for a limit of 20
	)
	s := newStore(t, memstore.WithShards(8))
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: limit, Window: time.Hour}
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range keys * tries {
				k := (i + g*37) % keys
				d, _, err := memstore.TakeOne(s, context.Background(), t0, core.Request{Key: fmt.Sprint("key-", k), Policy: p, Cost: 1})
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	// Every other algorithm, on the real clock, on the side.
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		q := core.Policy{Name: "q", Algorithm: alg, Limit: 50, Window: time.Second}
		wg.Go(func() {
			for i := range 2000 {
				if _, _, err := memstore.TakeOne(s, context.Background(), time.Time{}, core.Request{Key: fmt.Sprint("rt-", i%64), Policy: q, Cost: 1}); !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	other := core.Policy{Name: "other", Algorithm: core.SlidingWindowLog, Limit: 5, Window: time.Second}
	wg.Go(func() {
		for i := range 1000 {
			_ = s.Reset(context.Background(), fmt.Sprint("key-", i%keys), other)
			_ = s.Len()
		}
	})
	wg.Wait()
	for k := range admitted {
		assert.Equal(t, int64(limit), admitted[k].Load(), "key-%d: admitted", k)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := mustNew(t)
	for i := range 3 {
		require.NoError(t, s.Close(), "Close %d", i)
	}
	// The Store still decides after Close.
	p := core.Policy{Name: "p", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Second}
	assert.True(t, take(t, s, "k", p, 1, t0).Allowed, "after Close: Allowed")
}
