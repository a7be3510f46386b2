package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkPeek measures, beside BenchmarkTake, a peek (Take of cost 0)
// against a take of cost 1 on one hot key of each algorithm, and TakeAll
// of four peeks against TakeAll of four takes (fourLayers: four
// algorithms, one with a lockout), from one goroutine against a local
// redis-server with Redis TIME; redis-µs/op is the time Redis spent in the
// scripts (INFO commandstats). The policies are generous, so that every
// take passes and writes, and every peek would.
func BenchmarkPeek(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	var before int64
	start := func(b *testing.B) {
		before = scriptMicros(b, srv)
		b.ReportAllocs()
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(scriptMicros(b, srv)-before)/float64(b.N), "redis-µs/op")
	}
	for _, p := range policies(limits.MaxLogLimit, time.Second) {
		for _, cost := range []int64{1, 0} {
			name := "take/"
			if cost == 0 {
				name = "peek/"
			}
			reqs, out := []core.Request{{Key: "hot", Policy: p, Cost: 1}}, make([]core.Decision, 1)
			b.Run(name+string(p.Algorithm), func(b *testing.B) {
				if _, err := s.Take(ctx, time.Time{}, reqs, out); err != nil { // warm up, and some state
					b.Fatal(err)
				}
				start(b)
				for b.Loop() {
					var err error
					if cost == 0 {
						err = s.Peek(ctx, time.Time{}, reqs, out)
					} else {
						_, err = s.Take(ctx, time.Time{}, reqs, out)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				report(b)
			})
		}
	}
	for _, cost := range []int64{1, 0} {
		name := "takeall-4"
		if cost == 0 {
			name = "peekall-4"
		}
		reqs := fourLayers("bench", time.Time{})
		for i := range reqs {
			reqs[i].Policy.Limit, reqs[i].Policy.Window = limits.MaxLogLimit, time.Second
		}
		out := make([]core.Decision, len(reqs))
		b.Run(name, func(b *testing.B) {
			if err := errOf(s.Take(ctx, time.Time{}, reqs, out)); err != nil { // warm up, and some state
				b.Fatal(err)
			}
			start(b)
			for b.Loop() {
				var err error
				if cost == 0 {
					err = s.Peek(ctx, time.Time{}, reqs, out)
				} else {
					_, err = s.Take(ctx, time.Time{}, reqs, out)
				}
				if err != nil {
					b.Fatal(err)
				}
				if !out[0].Allowed {
					b.Fatal("denied")
				}
			}
			report(b)
		})
	}
}
