package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkMultiClusterSpread measures, from one goroutine against a local
// 3-master Redis Cluster, a layered Limiter's AllowLayers over four token
// buckets whose client keys are in four slots on the three masters:
// "admitted", every layer with room (a check, then a take: two pipelined
// round trips), and "denied", the last layer full (the check alone: one).
func BenchmarkMultiClusterSpread(b *testing.B) {
	cl := redistest.StartCluster(b)
	c := cl.Client()
	s := mustNew(b, c, WithPrefix(testPrefix(b)))
	b.Cleanup(func() { _ = s.Close() })
	keys := spreadKeys(b, s, c, 4)
	ctx := context.Background()
	for _, name := range []string{"admitted", "denied"} {
		layers := make([]core.Policy, 4)
		checks := make([]core.Request, 4)
		for i := range layers {
			p := core.Policy{Algorithm: core.TokenBucket, Limit: limits.MaxLogLimit, Window: time.Second}
			if name == "denied" && i == 3 {
				p = core.Policy{Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour}
			}
			layers[i] = limitertest.Named(p, fmt.Sprintf("%s%d", name, i))
			checks[i] = core.Request{Key: keys[i], Cost: 1}
		}
		l, err := core.NewLimiter(within(s, 5*time.Second), layers)
		if err != nil {
			b.Fatal(err)
		}
		var v limitertest.Verdict
		if err := limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v); err != nil { // loads the scripts; fills the denying layer
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v); err != nil {
					b.Fatal(err)
				}
				if v.Allowed != (name == "admitted") {
					b.Fatalf("%s: allowed %v", name, v.Allowed)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkPartitioner measures the name of a key's partition over a
// cluster client (the master of its slot, from go-redis's slot map),
// which a core.Limiter asks on every decision over a cluster.
func BenchmarkPartitioner(b *testing.B) {
	cl := redistest.StartCluster(b)
	s := mustNew(b, cl.Client(), WithPrefix(testPrefix(b)))
	b.Cleanup(func() { _ = s.Close() })
	name := s.Partitioner()
	deadline := time.Now().Add(5 * time.Second)
	for name("k") == "" {
		if time.Now().After(deadline) {
			b.Fatal("no slot map after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("203.0.113.%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if name(keys[i%len(keys)]) == "" {
			b.Fatal("no name")
		}
		i++
	}
}
