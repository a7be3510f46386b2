package redisstore

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkLimiter measures decisions through a core.Limiter against a
// local redis-server, with Redis TIME (no explicit clock): on one hot key,
// over 10 000 keys, and over 10 000 keys from GOMAXPROCS goroutines. The
// policies are generous (100 000 per second), so that most requests pass
// and write.
func BenchmarkLimiter(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	}
	for _, p := range policies(limits.MaxLogLimit, time.Second) {
		l, err := core.NewLimiter(within(s, time.Second), []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(p.Algorithm)+"/one-key", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.AllowN(ctx, "hot", 1, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(string(p.Algorithm)+"/many-keys", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := l.AllowN(ctx, keys[i%len(keys)], 1, time.Time{}); err != nil {
					b.Fatal(err)
				}
				i++
			}
			report(b)
		})
		b.Run(string(p.Algorithm)+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) * 7919
				for pb.Next() {
					if _, err := l.AllowN(ctx, keys[i%len(keys)], 1, time.Time{}); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			report(b)
		})
	}
}

// BenchmarkTake measures Store.Take alone, without the Limiter's bounding
// goroutine and timer, for the token bucket on one key.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	req := core.Request{Key: "hot", Cost: 1, Policy: core.Policy{
		Name: "bench", Algorithm: core.TokenBucket, Limit: limits.MaxLogLimit, Window: time.Second,
	}}
	reqs, out := []core.Request{req}, make([]core.Decision, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Take(ctx, time.Time{}, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkRefund gives back one unit of an admission, on one key and on
// four (give_back.lua, one run over every key): what a request that
// settles for less than it took costs.
func BenchmarkRefund(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	for _, n := range []int{1, 4} {
		reqs := make([]core.Request, n)
		for i := range reqs {
			reqs[i] = core.Request{Key: "hot-" + strconv.Itoa(i), Cost: 1, Policy: core.Policy{
				Name: "bench", Algorithm: core.TokenBucket, Limit: limits.MaxLogLimit, Window: time.Second,
			}}
		}
		at, err := s.Take(ctx, time.Time{}, reqs, make([]core.Decision, n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("keys-"+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Refund(ctx, at, reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLimiterCall compares how a core.Limiter calls the Store: on a
// goroutine it can abandon (a client with default options) or directly with
// its timeout as deadline (ContextTimeoutEnabled, see Store.CallMode).
func BenchmarkLimiterCall(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	p := core.Policy{Name: "call", Algorithm: core.TokenBucket, Limit: 100_000, Window: time.Second}
	for _, kind := range clientKinds {
		opts := srv.Options()
		opts.ContextTimeoutEnabled = kind.contextDeadline
		client := redis.NewClient(opts)
		b.Cleanup(func() { _ = client.Close() })
		l, err := core.NewLimiter(within(mustNew(b, client, WithPrefix(testPrefix(b))), time.Second), []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(kind.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.AllowN(ctx, "hot", 1, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkDeniedFlood measures one client flooding past its limit, with
// and without core.WithDenyCache.
func BenchmarkDeniedFlood(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	p := core.Policy{Name: "flood", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour}
	for _, cached := range []bool{false, true} {
		name, opts := "no-cache", []core.Option(nil)
		if cached {
			name, opts = "deny-cache", append(opts, core.WithDenyCache(10_000))
		}
		l, err := core.NewLimiter(within(s, time.Second), []core.Policy{p}, opts...)
		if err != nil {
			b.Fatal(err)
		}
		key := "flooder-" + name
		if d, err := l.AllowN(ctx, key, 1, time.Time{}); err != nil || !d.Allowed {
			b.Fatalf("%+v, %v", d, err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, err := l.AllowN(ctx, key, 1, time.Time{}); err != nil || d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkLockout compares, on one hot key over a local redis-server, a
// policy without a lockout, the same policy with one (the lockout key
// read, the algorithm admitting), and a client locked out (answered from
// the lockout key, the algorithm's script not run).
func BenchmarkLockout(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		limit   int64
		lockout time.Duration
		allowed bool
	}{
		{"none", limits.MaxLimit, 0, true},
		{"admitted", limits.MaxLimit, time.Hour, true},
		{"locked-out", 1, time.Hour, false},
	} {
		p := core.Policy{Name: "bench-" + c.name, Algorithm: core.TokenBucket, Limit: c.limit, Window: time.Hour, Lockout: c.lockout}
		l, err := core.NewLimiter(within(s, time.Second), []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for range 3 {
				_, _ = l.AllowN(ctx, "hot", 1, time.Time{})
			}
			b.ReportAllocs()
			for b.Loop() {
				d, err := l.AllowN(ctx, "hot", 1, time.Time{})
				if err != nil || d.Allowed != c.allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
		})
	}
}

// unbatched skips the Store's batcher: each decision runs on a goroutine
// of its own (bounded), one EVALSHA per decision: the path before
// batching.
type unbatched struct{ s *Store }

func (u unbatched) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if len(reqs) != 1 || len(out) != 1 {
		return u.s.Take(ctx, now, reqs, out)
	}
	var d core.Decision
	err := u.s.bounded(ctx, time.Now().Add(time.Second), func(sctx context.Context) (err error) {
		d, _, err = u.s.take(sctx, now, reqs[0], time.Time{})
		return err
	})
	out[0] = d
	return time.Time{}, err
}

func (u unbatched) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	return u.s.Peek(ctx, now, reqs, out)
}

func (u unbatched) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	return u.s.Refund(ctx, at, reqs)
}

func (u unbatched) Reset(ctx context.Context, key string, p core.Policy) error {
	return u.s.Reset(ctx, key, p)
}

// BenchmarkBatch compares, through a core.Limiter over a default client,
// the batched path (TakeBy: flusher goroutines, pipelines) with the
// unbatched one (the Limiter's goroutine, one EVALSHA per decision), from
// one goroutine (reporting p50 and p99 latency) and from 64, on one hot
// key.
func BenchmarkBatch(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	b.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	p := core.Policy{Name: "batch", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	for _, c := range []struct {
		name  string
		store core.Store
	}{{"batched", within(s, time.Second)}, {"unbatched", unbatched{s}}} {
		l, err := core.NewLimiter(c.store, []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/1g", func(b *testing.B) {
			b.ReportAllocs()
			took := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				if _, err := l.AllowN(ctx, "hot", 1, time.Time{}); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run(c.name+"/64g", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.AllowN(ctx, "hot", 1, time.Time{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
