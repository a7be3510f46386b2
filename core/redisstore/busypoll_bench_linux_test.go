package redisstore

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkBusyPoll is a lone decision (one goroutine, one hot key, a
// token bucket never reached) through a Limiter over a default client,
// with the default busy poll (poll-default), none (poll0), 50 µs (the
// default before) and 400 µs; beside them go-redis/redis_rate's script over
// the same client. It reports decisions/s and the process's CPU per
// decision (getrusage): what polling saves in latency and costs in CPU on
// the machine at hand.
func BenchmarkBusyPoll(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	p := core.Policy{Name: "poll", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"poll-default", nil},
		{"poll0", []Option{WithBusyPoll(0)}},
		{"poll50", []Option{WithBusyPoll(50 * time.Microsecond)}},
		{"poll400", []Option{WithBusyPoll(400 * time.Microsecond)}},
	} {
		s := mustNew(b, srv.Client(), append([]Option{WithPrefix(testPrefix(b))}, c.opts...)...)
		l, err := core.NewLimiter(within(s, time.Second), []core.Policy{p})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			decideLoop(b, func() error {
				_, err := l.Allow(ctx, "hot")
				return err
			})
		})
		_ = s.Close()
	}
	c := srv.Client()
	sc := redis.NewScript(redisRateAllowN)
	b.Run("redis_rate", func(b *testing.B) {
		// Burst and rate of a million a second: never reached.
		decideLoop(b, func() error { return sc.Run(ctx, c, []string{"rr:hot"}, 1000000, 1000000, 1, 1).Err() })
	})
}

// decideLoop makes a decision with decide b.N times and reports
// decisions/s and the process's CPU (user and system, getrusage) per
// decision, in µs.
func decideLoop(b *testing.B, decide func() error) {
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for b.Loop() {
		if err := decide(); err != nil {
			b.Fatal(err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs")
}
