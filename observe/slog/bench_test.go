package sloglimit_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	sloglimit "github.com/apigate/ratelimit/observe/slog"
)

// BenchmarkDeniedFlood measures a flood of denials through Limiter.AllowNN
// over a memstore (one client, one hourly request), on the real clock:
//
//   - unobserved: no observer, the baseline;
//   - dropped: a Logger whose sampler has no room left (one record an
//     hour), so that every denial is dropped: the cost of a flood;
//   - dropped-parallel: the same from every P at once, all on one limit;
//   - disabled: a Logger whose level the handler does not enable;
//   - written: a Logger that writes every denial (JSON to io.Discard).
func BenchmarkDeniedFlood(b *testing.B) {
	ctx := context.Background()
	const key = "ip:203.0.113.7"
	json := func(level slog.Level) *slog.Logger {
		return slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: level}))
	}
	limiter := func(b *testing.B, opts ...core.Option) *core.Limiter {
		b.Helper()
		l := newLimiter(b, newMemStore(b), hourly, opts...)
		for range 5 { // the admission, then the sampler's burst
			_, _ = l.AllowN(ctx, key, 1, time.Time{})
		}
		b.ReportAllocs()
		b.ResetTimer()
		return l
	}
	observer := func(b *testing.B, logger *slog.Logger, opts ...sloglimit.Option) core.Option {
		b.Helper()
		lg, err := sloglimit.New(logger, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return core.WithObserver(lg)
	}
	run := func(b *testing.B, l *core.Limiter) {
		for b.Loop() {
			if d, _ := l.AllowN(ctx, key, 1, time.Time{}); d.Allowed {
				b.Fatal("admitted")
			}
		}
	}
	b.Run("unobserved", func(b *testing.B) {
		run(b, limiter(b))
	})
	b.Run("dropped", func(b *testing.B) {
		run(b, limiter(b, observer(b, json(slog.LevelInfo), sloglimit.WithSampling(1.0/3600, 1))))
	})
	b.Run("dropped-parallel", func(b *testing.B) {
		l := limiter(b, observer(b, json(slog.LevelInfo), sloglimit.WithSampling(1.0/3600, 1)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, _ := l.AllowN(ctx, key, 1, time.Time{}); d.Allowed {
					b.Error("admitted")
					return
				}
			}
		})
	})
	b.Run("disabled", func(b *testing.B) {
		run(b, limiter(b, observer(b, json(slog.LevelError))))
	})
	b.Run("written", func(b *testing.B) {
		run(b, limiter(b, observer(b, json(slog.LevelInfo), sloglimit.WithSampling(1e9, 1<<30))))
	})
}

// BenchmarkObserveDropped measures the Logger alone: one denial that
// its sampler drops.
func BenchmarkObserveDropped(b *testing.B) {
	lg, err := sloglimit.New(slog.New(slog.NewJSONHandler(io.Discard, nil)), sloglimit.WithSampling(1.0/3600, 1))
	if err != nil {
		b.Fatal(err)
	}
	observe, err := lg.Bind(nil)
	if err != nil {
		b.Fatal(err)
	}
	e := core.Event{Key: "ip:203.0.113.7", Cost: 1, Binding: true,
		Decision: core.Decision{Limit: 1, RetryAfter: 1000, Policy: hourly}}
	observe(e)
	b.ReportAllocs()
	for b.Loop() {
		observe(e)
	}
}
