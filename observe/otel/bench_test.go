package otellimit_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	otellimit "github.com/apigate/ratelimit/observe/otel"
)

// BenchmarkAllow measures Limiter.AllowN over a memstore with no observer,
// with otellimit bound to an SDK MeterProvider read by a ManualReader, and
// with otellimit over the noop provider (the cost of the hook and of
// Observe alone). Observation must add no allocation.
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	p := core.Policy{Name: "bench", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	run := func(b *testing.B, opts ...core.Option) {
		l := newLimiter(b, newMemStore(b), p, opts...)
		for range 5 {
			_, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			d, err := l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
			if err != nil || !d.Allowed {
				b.Fatalf("%+v, %v", d, err)
			}
		}
	}
	b.Run("unobserved", func(b *testing.B) { run(b) })
	b.Run("otel-sdk", func(b *testing.B) {
		m, _ := newMetrics(b)
		run(b, core.WithObserver(m))
	})
	b.Run("otel-noop", func(b *testing.B) {
		m, err := otellimit.New(noop.NewMeterProvider())
		if err != nil {
			b.Fatal(err)
		}
		run(b, core.WithObserver(m))
	})
}

// BenchmarkDenied measures the denied paths with otellimit on an SDK
// provider: a store denial (near-limit bookkeeping, a second series) and
// a deny-cache answer.
func BenchmarkDenied(b *testing.B) {
	ctx := context.Background()
	p := core.Policy{Name: "bench-denied", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	run := func(b *testing.B, opts ...core.Option) {
		m, _ := newMetrics(b)
		l := newLimiter(b, newMemStore(b), p, append(opts, core.WithObserver(m))...)
		_, _ = l.AllowN(ctx, "k", 1, time.Time{})
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if d, _ := l.AllowN(ctx, "k", 1, time.Time{}); d.Allowed {
				b.Fatal("allowed")
			}
		}
	}
	b.Run("store", func(b *testing.B) { run(b) })
	b.Run("deny-cache", func(b *testing.B) { run(b, core.WithDenyCache(16)) })
}
