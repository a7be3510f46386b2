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
	// measure runs b on reqs: a take to warm up (and leave some state),
	// then a peek, or a take, of reqs each time, every one passing.
	measure := func(b *testing.B, peek bool, reqs []core.Request) {
		out := make([]core.Decision, len(reqs))
		if err := errOf(s.Take(ctx, time.Time{}, reqs, out)); err != nil {
			b.Fatal(err)
		}
		before := scriptMicros(b, srv)
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if peek {
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
		b.ReportMetric(float64(scriptMicros(b, srv)-before)/float64(b.N), "redis-µs/op")
	}
	for _, p := range policies(limits.MaxLogLimit, time.Second) {
		for _, peek := range []bool{false, true} {
			name := "take/"
			if peek {
				name = "peek/"
			}
			reqs := []core.Request{{Key: "hot", Policy: p, Cost: 1}}
			b.Run(name+string(p.Algorithm), func(b *testing.B) { measure(b, peek, reqs) })
		}
	}
	for _, peek := range []bool{false, true} {
		name := "takeall-4"
		if peek {
			name = "peekall-4"
		}
		reqs := fourLayers("bench", time.Time{})
		for i := range reqs {
			reqs[i].Policy.Limit, reqs[i].Policy.Window = limits.MaxLogLimit, time.Second
		}
		b.Run(name, func(b *testing.B) { measure(b, peek, reqs) })
	}
}
