package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// benchPolicy admits every request of the benchmarks: the limit is far above
// what a loop reaches. The sliding log keeps one entry per distinct
// microsecond in its window, so its window is short to bound the log.
func benchPolicy(alg core.Algorithm) core.Policy {
	p := core.Policy{Name: "bench", Algorithm: alg, Limit: limits.MaxLimit, Window: time.Second}
	if alg == core.SlidingWindowLog {
		p.Limit, p.Window = limits.MaxLogLimit, time.Millisecond
	}
	return p
}

func newLimiter(b *testing.B, s core.Store, p core.Policy) *core.Limiter {
	b.Helper()
	l, err := core.NewLimiter(s, []core.Policy{p})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkAllow decides for one hot key on the real clock, allowed and
// denied.
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		for _, mode := range []string{"allowed", "denied"} {
			b.Run(string(alg)+"/"+mode, func(b *testing.B) {
				s := mustNew(b)
				p := benchPolicy(alg)
				if mode == "denied" {
					p.Limit, p.Window = 10, time.Hour
				}
				l := newLimiter(b, s, p)
				want := mode == "allowed"
				for range 10 {
					_, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					d, err := l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
					if err != nil || d.Allowed != want {
						b.Fatalf("got %+v, %v", d, err)
					}
				}
				reportRate(b)
			})
		}
	}
}

// BenchmarkAllowKeyspace spreads token-bucket decisions over a growing
// number of distinct keys, all created before the timer starts, in a Store
// sized to hold them (the 1M keys are twice DefaultMaxKeys).
func BenchmarkAllowKeyspace(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s := mustNew(b, memstore.WithMaxKeys(max(n, memstore.DefaultMaxKeys)))
			l := newLimiter(b, s, benchPolicy(core.TokenBucket))
			keys := makeKeys(n)
			before := heapInUse()
			for _, k := range keys {
				_, _ = l.AllowN(ctx, k, 1, time.Time{})
			}
			perKey := float64(heapInUse()-before) / float64(n)
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if d, err := l.AllowN(ctx, keys[i], 1, time.Time{}); err != nil || !d.Allowed {
					b.Fatalf("got %+v, %v", d, err)
				}
				if i++; i == n {
					i = 0
				}
			}
			reportRate(b)
			b.ReportMetric(perKey, "heap-B/key")
		})
	}
}

// BenchmarkAllowNewKeys decides for a new key every time, in a Store of
// 10 000 keys, so that every decision inserts an entry, and a full store
// evicts one: the cost of a flood of new clients (a scan, a spoofed
// address range), and of each new entry's copy of its key.
func BenchmarkAllowNewKeys(b *testing.B) {
	ctx := context.Background()
	s := mustNew(b, memstore.WithMaxKeys(10_000))
	l := newLimiter(b, s, benchPolicy(core.TokenBucket))
	keys := makeKeys(1 << 20)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if d, err := l.AllowN(ctx, keys[i], 1, time.Time{}); err != nil || !d.Allowed {
			b.Fatalf("got %+v, %v", d, err)
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	reportRate(b)
}

// heapInUse returns the bytes of live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkAllowParallel decides from GOMAXPROCS goroutines, and from 16
// whatever GOMAXPROCS (the hot-key case: more request goroutines
// than CPUs, contending for one shard's lock), on one hot key and over
// 100 000 keys.
func BenchmarkAllowParallel(b *testing.B) {
	ctx := context.Background()
	procs := runtime.GOMAXPROCS(0)
	for _, g := range []int{procs, 16} {
		for _, n := range []int{1, 100_000} {
			b.Run(fmt.Sprintf("token_bucket/goroutines=%d/keys=%d", g, n), func(b *testing.B) {
				s := mustNew(b)
				l := newLimiter(b, s, benchPolicy(core.TokenBucket))
				keys := makeKeys(n)
				for _, k := range keys {
					_, _ = l.AllowN(ctx, k, 1, time.Time{})
				}
				var seq atomic.Int64
				b.SetParallelism((g + procs - 1) / procs)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seq.Add(7919)) % n
					for pb.Next() {
						if d, err := l.AllowN(ctx, keys[i], 1, time.Time{}); err != nil || !d.Allowed {
							b.Errorf("got %+v, %v", d, err)
							return
						}
						if i++; i == n {
							i = 0
						}
					}
				})
				reportRate(b)
			})
		}
	}
}

// BenchmarkTake is the store alone, without the Limiter, for one hot key.
func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	s := mustNew(b)
	req := core.Request{Key: "203.0.113.7", Policy: benchPolicy(core.TokenBucket), Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := memstore.TakeOne(s, ctx, time.Time{}, req); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b)
}

// BenchmarkSlidingLog decides one sliding-log key whose window holds n
// entries, one per microsecond: every allowed request forgets the oldest
// entry and logs a new one; every denied request (a full log, a later
// request of the same microsecond) reports when the oldest unit leaves.
func BenchmarkSlidingLog(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int64{1_000, 10_000, 100_000} {
		for _, mode := range []string{"allowed", "denied"} {
			b.Run(fmt.Sprintf("entries=%d/%s", n, mode), func(b *testing.B) {
				s := mustNew(b, memstore.WithCleanupInterval(time.Hour))
				p := core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: n, Window: time.Duration(n) * time.Microsecond}
				req := core.Request{Key: "203.0.113.7", Policy: p, Cost: 1}
				t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
				at := int64(0)
				for ; at < n; at++ {
					if d, _, err := memstore.TakeOne(s, ctx, t0.Add(time.Duration(at)*time.Microsecond), req); err != nil || !d.Allowed {
						b.Fatalf("filling: got %+v, %v", d, err)
					}
				}
				want := mode == "allowed"
				if !want {
					at-- // the microsecond of the newest entry
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if want {
						at++
					}
					if d, _, err := memstore.TakeOne(s, ctx, t0.Add(time.Duration(at)*time.Microsecond), req); err != nil || d.Allowed != want {
						b.Fatalf("got %+v, %v", d, err)
					}
				}
				reportRate(b)
			})
		}
	}
}

func makeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return keys
}

// BenchmarkAllowLockout decides for one hot key under a policy with a
// Lockout: admitted (the lockout looked up, not in force), and locked out
// (answered from the lockout, the algorithm not asked).
func BenchmarkAllowLockout(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"allowed", "locked"} {
		b.Run(mode, func(b *testing.B) {
			p := benchPolicy(core.TokenBucket)
			p.Lockout = time.Hour
			if mode == "locked" {
				p.Limit, p.Window = 1, time.Hour
			}
			l := newLimiter(b, mustNew(b), p)
			for range 10 {
				_, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
			}
			want := mode == "allowed"
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				d, err := l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
				if err != nil || d.Allowed != want || d.LockedOut == want {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			reportRate(b)
		})
	}
}
