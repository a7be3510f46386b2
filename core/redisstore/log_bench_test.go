package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkSlidingWindowLog measures one sliding-log decision (Store.Take,
// one script run) against a local redis-server, at cost 1 and at cost
// 100 000, the largest a log admits, and reports the script's own time in
// Redis (µs/script, from INFO commandstats) beside the round trip.
//
//   - cost=1: requests at Redis TIME under 100 000 per second; the log
//     holds about one second of them.
//   - cost=100000/admitted: each request fills the whole limit, one window
//     after the previous one, which it trims.
//   - cost=100000/denied: a log of 20 000 requests of cost 1 refuses a
//     request of cost 100 000, whose RetryAfter is the newest request's.
func BenchmarkSlidingWindowLog(b *testing.B) {
	srv := redistest.Start(b)
	s := mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))
	ctx := context.Background()
	p := core.Policy{Name: "bench", Algorithm: core.SlidingWindowLog, Limit: limits.MaxLogLimit, Window: time.Second}
	run := func(b *testing.B, req func(i int) (time.Time, core.Request), allowed bool) {
		b.Helper()
		before := scriptMicros(b, srv)
		reqs, out := make([]core.Request, 1), make([]core.Decision, 1)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			var now time.Time
			now, reqs[0] = req(i)
			_, err := s.Take(ctx, now, reqs, out)
			if d := out[0]; err != nil || d.Allowed != allowed {
				b.Fatalf("%+v, %v; want Allowed %v", d, err, allowed)
			}
			i++
		}
		b.ReportMetric(float64(scriptMicros(b, srv)-before)/float64(i), "µs/script")
	}
	b.Run("cost=1", func(b *testing.B) {
		run(b, func(int) (time.Time, core.Request) {
			return time.Time{}, core.Request{Key: "small", Policy: p, Cost: 1}
		}, true)
	})
	b.Run("cost=100000/admitted", func(b *testing.B) {
		w := p.Window + time.Microsecond
		run(b, func(i int) (time.Time, core.Request) {
			return t0.Add(time.Duration(i) * w), core.Request{Key: "large", Policy: p, Cost: p.Limit}
		}, true)
	})
	b.Run("cost=100000/denied", func(b *testing.B) {
		const n = 20_000
		for i := range n {
			req := core.Request{Key: "full", Policy: p, Cost: 1}
			if d, _, err := take1(s, ctx, t0.Add(time.Duration(i)*time.Microsecond), req); err != nil || !d.Allowed {
				b.Fatalf("%+v, %v", d, err)
			}
		}
		at := t0.Add(n * time.Microsecond)
		run(b, func(int) (time.Time, core.Request) { return at, core.Request{Key: "full", Policy: p, Cost: p.Limit} }, false)
	})
}

// scriptMicros returns the microseconds Redis has spent in EVALSHA and EVAL
// so far, by INFO commandstats.
func scriptMicros(tb testing.TB, srv *redistest.Server) int64 {
	tb.Helper()
	stats, err := commandStats(context.Background(), srv.Client())
	if err != nil {
		tb.Fatal(err)
	}
	return stats["evalsha"].usec + stats["eval"].usec
}
