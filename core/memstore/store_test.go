package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// t0 is the fixed time of the explicit-clock tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// newStore returns a Store closed at the end of the test. Its janitor runs
// every hour, so that it never sweeps the explicit-clock state of a test.
func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s := memstore.New(append([]memstore.Option{memstore.WithCleanupInterval(time.Hour)}, opts...)...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// policies has one policy of limit 3 per algorithm.
func policies() []core.Policy {
	var ps []core.Policy
	for _, alg := range core.Algorithms() {
		ps = append(ps, core.Policy{Name: "p-" + string(alg), Algorithm: alg, Limit: 3, Window: time.Minute})
	}
	return ps
}

func take(t *testing.T, s core.Store, key string, p core.Policy, cost int64, now time.Time) core.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), core.Request{Key: key, Policy: p, Cost: cost, Now: now})
	if err != nil {
		t.Fatalf("Take(%q, %s, %d): %v", key, p.Algorithm, cost, err)
	}
	return d
}

func TestTakeExhaustsThenDenies(t *testing.T) {
	for _, p := range policies() {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			s := newStore(t)
			for i := range 3 {
				d := take(t, s, "k", p, 1, t0)
				if !d.Allowed || d.Remaining != int64(2-i) || d.Limit != 3 {
					t.Fatalf("request %d: got %+v, want allowed with %d remaining of 3", i, d, 2-i)
				}
			}
			d := take(t, s, "k", p, 1, t0)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("4th request: got %+v, want denied with a RetryAfter", d)
			}
			// A later request passes once the state has expired, and
			// finds a whole quota: expired state decides like none.
			d = take(t, s, "k", p, 1, t0.Add(time.Hour))
			if !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after expiry: got %+v, want allowed with 2 remaining", d)
			}
		})
	}
}

func TestDeniedRequestsChangeNothing(t *testing.T) {
	for _, p := range policies() {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			s := newStore(t)
			take(t, s, "k", p, 3, t0)
			first := take(t, s, "k", p, 1, t0.Add(time.Millisecond))
			for range 5 {
				if d := take(t, s, "k", p, 1, t0.Add(time.Millisecond)); d != first {
					t.Fatalf("repeated denied request: got %+v, want %+v", d, first)
				}
			}
			if s.Len() != 1 {
				t.Fatalf("Len = %d, want 1", s.Len())
			}
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
			if d := take(t, s, "k", p, 1, t0); d.Allowed {
				t.Fatalf("before Reset: got %+v, want denied", d)
			}
			if err := s.Reset(context.Background(), "k", p); err != nil {
				t.Fatal(err)
			}
			if d := take(t, s, "k", p, 1, t0); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after Reset: got %+v, want allowed with 2 remaining", d)
			}
			// Other keys and other policies keep their state.
			if d := take(t, s, "k2", p, 1, t0); d.Allowed {
				t.Fatalf("other key after Reset: got %+v, want denied", d)
			}
			if d := take(t, s, "k", other, 1, t0); d.Allowed {
				t.Fatalf("other policy after Reset: got %+v, want denied", d)
			}
			// Resetting an unknown key is fine.
			if err := s.Reset(context.Background(), "nobody", p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPoliciesDoNotShareState(t *testing.T) {
	s := newStore(t)
	a := core.Policy{Name: "same", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	b := a
	b.Algorithm = core.TokenBucket
	take(t, s, "k", a, 1, t0)
	if d := take(t, s, "k", b, 1, t0); !d.Allowed {
		t.Fatalf("same name, other algorithm: got %+v, want allowed", d)
	}
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}
}

func TestInvalidRequests(t *testing.T) {
	good := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 3, Window: time.Second}
	with := func(f func(*core.Request)) core.Request {
		r := core.Request{Key: "k", Policy: good, Cost: 1, Now: t0}
		f(&r)
		return r
	}
	tests := []struct {
		name string
		req  core.Request
		want error
	}{
		{"empty key", with(func(r *core.Request) { r.Key = "" }), core.ErrInvalidKey},
		{"unknown algorithm", with(func(r *core.Request) { r.Policy.Algorithm = "gcra" }), core.ErrInvalidPolicy},
		{"zero limit", with(func(r *core.Request) { r.Policy.Limit = 0 }), core.ErrInvalidPolicy},
		{"zero window", with(func(r *core.Request) { r.Policy.Window = 0 }), core.ErrInvalidPolicy},
		{"negative burst", with(func(r *core.Request) { r.Policy.Burst = -1 }), core.ErrInvalidPolicy},
		{"huge log", with(func(r *core.Request) {
			r.Policy.Algorithm, r.Policy.Limit = core.SlidingWindowLog, core.MaxLogLimit+1
		}), core.ErrInvalidPolicy},
		{"zero cost", with(func(r *core.Request) { r.Cost = 0 }), core.ErrInvalidCost},
		{"cost above capacity", with(func(r *core.Request) { r.Cost = 4 }), core.ErrCostExceedsLimit},
	}
	s := newStore(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Take(context.Background(), tt.req); !errors.Is(err, tt.want) {
				t.Fatalf("Take: got error %v, want %v", err, tt.want)
			}
		})
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after invalid requests, want 0", s.Len())
	}
}

func TestZeroStoreFailsWithoutPanic(t *testing.T) {
	var s memstore.Store
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1, Window: time.Second}
	if _, err := s.Take(context.Background(), core.Request{Key: "k", Policy: p, Cost: 1}); err == nil {
		t.Fatal("Take on the zero Store: got no error")
	}
	if err := s.Reset(context.Background(), "k", p); err == nil {
		t.Fatal("Reset on the zero Store: got no error")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestKeyCapHolds(t *testing.T) {
	for _, shards := range []int{1, 4, 64} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			const maxKeys = 100
			s := newStore(t, memstore.WithMaxKeys(maxKeys), memstore.WithShards(shards))
			p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Hour}
			for i := range 10 * maxKeys {
				take(t, s, fmt.Sprintf("client-%d", i), p, 1, t0.Add(time.Duration(i)*time.Microsecond))
				if n := s.Len(); n > maxKeys {
					t.Fatalf("after %d inserts: Len = %d, above the cap %d", i+1, n, maxKeys)
				}
			}
			if n := s.Len(); n < maxKeys/2 {
				t.Fatalf("Len = %d, the cap %d is badly underused", n, maxKeys)
			}
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
				d, err := s.Take(context.Background(), core.Request{Key: fmt.Sprint("key-", k), Policy: p, Cost: 1, Now: t0})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[k].Add(1)
				}
			}
		})
	}
	// Every other algorithm, on the real clock, on the side.
	for _, alg := range core.Algorithms() {
		q := core.Policy{Name: "q", Algorithm: alg, Limit: 50, Window: time.Second}
		wg.Go(func() {
			for i := range 2000 {
				if _, err := s.Take(context.Background(), core.Request{Key: fmt.Sprint("rt-", i%64), Policy: q, Cost: 1}); err != nil {
					t.Error(err)
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
		if n := admitted[k].Load(); n != limit {
			t.Errorf("key-%d: %d admitted, want exactly %d", k, n, limit)
		}
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := memstore.New()
	for range 3 {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The Store still decides after Close.
	p := core.Policy{Name: "p", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Second}
	if d := take(t, s, "k", p, 1, t0); !d.Allowed {
		t.Fatalf("after Close: got %+v, want allowed", d)
	}
}
