package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// benchStore answers at once, without allocating: what is left is the
// Limiter's own cost.
type benchStore struct {
	quietless
	err error
}

// Take admits each request at once: what a store costs at the least.
func (s benchStore) Take(_ context.Context, _ time.Time, _ []core.Request, out []core.Decision) (time.Time, error) {
	for i := range out {
		out[i].Allowed, out[i].Limit, out[i].Remaining = true, 10, 9
	}
	return time.Time{}, s.err
}
func (benchStore) Reset(context.Context, string, core.Policy) error { return nil }

// partitionedBenchStore is a benchStore of three partitions, named by the
// key's last byte.
type partitionedBenchStore struct{ benchStore }

var benchPartitions = [...]string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}

func (partitionedBenchStore) Partitioner() func(string) string {
	return func(key string) string { return benchPartitions[key[len(key)-1]%3] }
}

// BenchmarkLimiterPaths measures the Limiter around a store that costs
// nothing: healthy (the hot path: one atomic load for the breaker), with
// the circuit breaker open (decided without the store), and with a
// memstore fallback mirroring a memstore primary.
func BenchmarkLimiterPaths(b *testing.B) {
	ctx := context.Background()
	p := core.Policy{Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	run := func(b *testing.B, l *core.Limiter, degraded bool) {
		b.Helper()
		for range 5 {
			_, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			d, err := l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
			if err != nil || (d.Err != nil) != degraded || !d.Allowed {
				b.Fatalf("%+v, %v", d, err)
			}
		}
	}
	b.Run("healthy", func(b *testing.B) {
		l, err := core.NewLimiter(benchStore{}, []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		run(b, l, false)
	})
	b.Run("circuit-open", func(b *testing.B) {
		l, err := core.NewLimiter(benchStore{err: errDown}, []core.Policy{p}, core.WithCircuitBreaker(1, time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		run(b, l, true)
	})
	b.Run("memstore", func(b *testing.B) {
		s := newMemStore(b)
		l, err := core.NewLimiter(s, []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		run(b, l, false)
	})
	b.Run("memstore-observed", func(b *testing.B) {
		// The cost of the observation hook itself: an observer that does
		// next to nothing.
		var n int
		obs := limitertest.Observer(func(e core.Event) {
			if outcome.Of(&e.Decision).Admitted() {
				n++
			}
		})
		l, err := core.NewLimiter(newMemStore(b), []core.Policy{p}, core.WithObserver(obs))
		if err != nil {
			b.Fatal(err)
		}
		run(b, l, false)
	})
	b.Run("partitioned", func(b *testing.B) {
		// A store of three partitions (a Redis Cluster's masters): the
		// Limiter finds the key's partition's breaker.
		l, err := core.NewLimiter(partitionedBenchStore{}, []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		run(b, l, false)
	})
	b.Run("memstore-layers", func(b *testing.B) {
		two := []core.Policy{limitertest.Named(p, "user"), limitertest.Named(p, "all")}
		l, err := core.NewLimiter(newMemStore(b), two)
		if err != nil {
			b.Fatal(err)
		}
		checks := []core.Request{{Key: "203.0.113.7", Cost: 1}, {Key: "all", Cost: 1}}
		b.ReportAllocs()
		for b.Loop() {
			if d, _, err := l.AllowLayers(ctx, time.Time{}, checks, nil); err != nil || !d.Allowed {
				b.Fatalf("%+v, %v", d, err)
			}
		}
	})
	b.Run("memstore-mirrored", func(b *testing.B) {
		s, local := newMemStore(b), newMemStore(b)
		l, err := core.NewLimiter(s, []core.Policy{p}, core.WithFallback(local))
		if err != nil {
			b.Fatal(err)
		}
		run(b, l, false)
	})
}

// BenchmarkDenyCache is a flood past the limit answered by the deny cache
// (WithDenyCache), the store never asked: bench's Redis/denied-1g/ours-denycache
// without Redis.
func BenchmarkDenyCache(b *testing.B) {
	ctx := context.Background()
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	l, err := core.NewLimiter(newMemStore(b), []core.Policy{p}, core.WithDenyCache(1000))
	if err != nil {
		b.Fatal(err)
	}
	for range 2 {
		_, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
	}
	b.ReportAllocs()
	for b.Loop() {
		d, err := l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
		if err != nil || d.Allowed || d.Source != core.SourceDenyCache {
			b.Fatalf("%+v, %v", d, err)
		}
	}
}
