package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// BenchmarkLease compares a leased layer with the same layer unleased, on
// the memory store: one layer (global), and a global layer with a
// per-client one (layered), each on one goroutine and on all of them
// (parallel: every goroutine on the one global key). A store call is
// counted per decision (calls/op).
func BenchmarkLease(b *testing.B) {
	global := core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Minute}
	client := core.Policy{Name: "client", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Minute}
	for _, leased := range []bool{false, true} {
		name := "plain"
		g := global
		if leased {
			name, g.Lease = "leased", 600*time.Millisecond
		}
		b.Run("global/"+name, func(b *testing.B) {
			benchLease(b, []core.Policy{g}, false, false)
		})
		b.Run("layered/"+name, func(b *testing.B) {
			benchLease(b, []core.Policy{g, client}, false, false)
		})
		b.Run("parallel/"+name, func(b *testing.B) {
			benchLease(b, []core.Policy{g}, true, false)
		})
		// Dated: on a virtual clock, a microsecond a decision, renewals on
		// the caller's goroutine: deterministic, for callgrind.
		b.Run("dated/global/"+name, func(b *testing.B) {
			benchLease(b, []core.Policy{g}, false, true)
		})
		b.Run("dated/layered/"+name, func(b *testing.B) {
			benchLease(b, []core.Policy{g, client}, false, true)
		})
	}
}

func benchLease(b *testing.B, policies []core.Policy, parallel, dated bool) {
	store := &limitertest.Counting{Store: newMemStore(b)}
	l, err := core.NewLimiter(store, policies)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	reqs := []core.Request{{Key: "api", Cost: 1}, {Key: "203.0.113.7", Cost: 1}}[:len(policies)]
	var now time.Time
	if dated {
		now = leaseT0
	}
	decide := func() {
		if dated {
			now = now.Add(time.Microsecond)
		}
		d, _, err := l.AllowLayers(ctx, now, reqs, nil)
		if err != nil || !d.Allowed {
			b.Fatalf("%+v, %v", d, err)
		}
	}
	for range 1000 { // the lease grown to its rate
		decide()
	}
	before := store.Takes()
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			r := []core.Request{{Key: "api", Cost: 1}}
			for pb.Next() {
				if d, _, err := l.AllowLayers(ctx, time.Time{}, r, nil); err != nil || !d.Allowed {
					b.Errorf("%+v, %v", d, err)
					return
				}
			}
		})
	} else {
		for b.Loop() {
			decide()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(store.Takes()-before)/float64(b.N), "calls/op")
}
