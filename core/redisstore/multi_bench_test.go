package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkMultiLayers measures, from one goroutine against a local
// redis-server with Redis TIME, a Limiter's AllowN on one token bucket
// ("single") beside a layered Limiter's AllowLayers over four layers of
// four algorithms on four client keys, one with a lockout ("layers-4"),
// over four token buckets ("buckets-4") and over one ("buckets-1"), each
// decided by one script; round-trips/op counts the client's commands and
// pipelines, redis-µs/op the time Redis spent in the scripts (INFO
// commandstats). The policies are generous, so that every request passes and
// writes. "direct" runs over a client with ContextTimeoutEnabled (the
// Limiters call the store on the caller's goroutine), "bounded" over the
// default client.
func BenchmarkMultiLayers(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, mode := range []string{"bounded", "direct"} {
		opts := srv.Options()
		opts.ContextTimeoutEnabled = mode == "direct"
		c := redis.NewClient(opts)
		b.Cleanup(func() { _ = c.Close() })
		h := newCommandCounter()
		c.AddHook(h)
		s := mustNew(b, c, WithPrefix(testPrefix(b)))
		b.Cleanup(func() { _ = s.Close() })
		<-s.checked // New's check of the configuration is done: its commands are not counted
		single, err := core.NewLimiter(within(s, time.Second), []core.Policy{{Name: "user", Algorithm: core.TokenBucket, Limit: limits.MaxLogLimit, Window: time.Second}})
		if err != nil {
			b.Fatal(err)
		}
		sets := []struct {
			name    string
			layered *core.Limiter
			checks  []core.Request
		}{
			{name: "layers-4"}, {name: "buckets-4"}, {name: "buckets-1"},
		}
		for k := range sets {
			reqs := fourLayers("bench", time.Time{})
			layers := make([]core.Policy, len(reqs))
			checks := make([]core.Request, len(reqs))
			for i, r := range reqs {
				p := r.Policy
				p.Name = ""
				p.Limit = limits.MaxLogLimit
				if p.Lockout != 0 {
					p.Lockout, p.LockoutMax, p.LockoutMemory = time.Minute, 0, 0
				}
				if sets[k].name != "layers-4" {
					p.Algorithm, p.Lockout, p.LockoutMax, p.LockoutMemory = core.TokenBucket, 0, 0, 0
				}
				p.Window = time.Second
				layers[i] = limitertest.Named(p, r.Policy.Name)
				checks[i] = core.Request{Key: r.Key, Cost: 1}
			}
			if sets[k].name == "buckets-1" {
				layers, checks = layers[1:2], []core.Request{{Key: "user-bench", Cost: 1}}
			}
			l, err := core.NewLimiter(within(s, time.Second), layers)
			if err != nil {
				b.Fatal(err)
			}
			sets[k].layered, sets[k].checks = l, checks
		}
		var before int64
		start := func() {
			h.reset()
			before = scriptMicros(b, srv)
		}
		trips := func(b *testing.B) {
			b.ReportMetric(float64(scriptMicros(b, srv)-before)/float64(b.N), "redis-µs/op")
			names, pipelines := h.snapshot()
			n := pipelines
			for _, k := range names {
				n += k
			}
			b.ReportMetric(float64(n)/float64(b.N), "round-trips/op")
		}
		b.Run(mode+"/single", func(b *testing.B) {
			if _, err := single.AllowN(ctx, "user-bench", 1, time.Time{}); err != nil { // warm up
				b.Fatal(err)
			}
			start()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := single.AllowN(ctx, "user-bench", 1, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			trips(b)
		})
		for _, set := range sets {
			layered, checks := set.layered, set.checks
			b.Run(mode+"/"+set.name, func(b *testing.B) {
				var v limitertest.Verdict
				if err := limitertest.AllowLayers(layered, ctx, checks, time.Time{}, &v); err != nil { // warm up
					b.Fatal(err)
				}
				start()
				b.ReportAllocs()
				for b.Loop() {
					if err := limitertest.AllowLayers(layered, ctx, checks, time.Time{}, &v); err != nil {
						b.Fatal(err)
					}
					if !v.Allowed {
						b.Fatal("denied")
					}
				}
				trips(b)
			})
		}
	}
}
