package redisstore

import (
	"context"
	"path/filepath"
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
				_, err := l.AllowN(ctx, "hot", 1, time.Time{})
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

// BenchmarkPollSocket is one poll of a socket with a byte waiting to be
// read, which busyConn.await finds at once: the cost of the peek itself
// (recvfrom with MSG_PEEK|MSG_DONTWAIT), over loopback TCP and over a Unix
// socket, whose peek can report the peer's address.
func BenchmarkPollSocket(b *testing.B) {
	for _, network := range []string{"tcp", "unix"} {
		b.Run(network, func(b *testing.B) {
			address := "127.0.0.1:0"
			if network == "unix" {
				address = filepath.Join(b.TempDir(), "redis.sock")
			}
			raw, peer := socketPair(b, network, address)
			if _, err := peer.Write([]byte("x")); err != nil {
				b.Fatal(err)
			}
			c, ok := busyPoll(raw, time.Millisecond).(*busyConn)
			if !ok {
				b.Fatal("not a busyConn")
			}
			b.ReportAllocs()
			for b.Loop() {
				if !c.await() {
					b.Fatal("nothing to read")
				}
			}
		})
	}
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
