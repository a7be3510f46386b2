package promlimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
)

// benchPolicy admits everything a benchmark sends.
var benchPolicy = core.Policy{Name: "bench", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}

// nopObserver hears events and does nothing with them.
type nopObserver struct{}

func (nopObserver) Bind(*core.Limiter) (func(core.Event), error) {
	return func(core.Event) {}, nil
}

// BenchmarkAllow is the target: Limiter.AllowN over a memstore
// with no observer ("none"), with an observer that does nothing ("hook")
// and with Metrics bound ("prometheus"), on one
// goroutine and on every P (each goroutine a client of its own, all under
// one limit, so that they share its counters as a server's requests do).
func BenchmarkAllow(b *testing.B) {
	for _, tc := range []struct {
		name     string
		observer func(b *testing.B) core.Observer
	}{
		{"none", nil},
		// core's observation hook alone, with an observer that does
		// nothing: what promlimit's cost adds to.
		{"hook", func(*testing.B) core.Observer { return nopObserver{} }},
		{"prometheus", func(b *testing.B) core.Observer { m, _ := newMetrics(b); return m }},
	} {
		build := func(b *testing.B) *core.Limiter {
			var opts []core.Option
			if tc.observer != nil {
				opts = append(opts, core.WithObserver(tc.observer(b)))
			}
			l, err := core.NewLimiter(newMemStore(b), []core.Policy{benchPolicy}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			return l
		}
		b.Run(tc.name, func(b *testing.B) {
			l := build(b)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if d, err := l.AllowN(ctx, "203.0.113.7", 1, time.Time{}); err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
		})
		b.Run(tc.name+"-parallel", func(b *testing.B) {
			l := build(b)
			ctx := context.Background()
			var id atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("203.0.113.%d", id.Add(1))
				for pb.Next() {
					if d, err := l.AllowN(ctx, key, 1, time.Time{}); err != nil || !d.Allowed {
						b.Errorf("%+v, %v", d, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkObserve is the bound Observer alone, on an event of each
// kind: what a Limiter's observation costs beyond the hook itself.
func BenchmarkObserve(b *testing.B) {
	m, err := promlimit.New()
	if err != nil {
		b.Fatal(err)
	}
	l, err := core.NewLimiter(newMemStore(b), []core.Policy{benchPolicy})
	if err != nil {
		b.Fatal(err)
	}
	o, err := m.Bind(l)
	if err != nil {
		b.Fatal(err)
	}
	allowed := core.Event{Key: "203.0.113.7", Cost: 1, Binding: true,
		Decision: core.Decision{Allowed: true, Limit: 100, Remaining: 50, Policy: benchPolicy}}
	timed := allowed
	timed.StoreLatency = 300 * time.Microsecond
	failed := core.Event{Key: "203.0.113.7", Cost: 1, Binding: true, StoreLatency: 100 * time.Millisecond,
		Decision: core.Decision{Allowed: true, Source: core.SourceFailMode, Policy: benchPolicy,
			Err: fmt.Errorf("%w: %w", limits.ErrStore, context.DeadlineExceeded)}}
	for _, tc := range []struct {
		name string
		e    core.Event
	}{{"allowed", allowed}, {"allowed-timed", timed}, {"timeout", failed}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				o(tc.e)
			}
		})
		b.Run(tc.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					o(tc.e)
				}
			})
		})
	}
}
