package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/redistest"
)

const (
	// outageTimeout is the Limiter's timeout in the outage tests.
	outageTimeout = 50 * time.Millisecond
	// slack is what a decision may take beyond the timeout: scheduling,
	// the race detector, a loaded machine. A correctness bound, not a
	// benchmark.
	slack = 150 * time.Millisecond
	// recoverWithin bounds the wait for decisions to succeed again.
	recoverWithin = 15 * time.Second
)

// clientKinds are the go-redis clients the outage tests run with: default
// options (ContextTimeoutEnabled false, ReadTimeout 3s), which the Limiter
// bounds with a goroutine of its own, and ContextTimeoutEnabled, which it
// calls directly with its timeout as the deadline (Store.HonorsDeadline).
var clientKinds = []struct {
	name            string
	contextDeadline bool
}{
	{"default-client", false},
	{"context-timeout-client", true},
}

// outageLimiters returns a fail-open and a fail-closed Limiter over one
// store whose client honours context deadlines only when contextDeadline.
func outageLimiters(t *testing.T, contextDeadline bool) (*redistest.Server, []*core.Limiter) {
	t.Helper()
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("REDIS_URL is set: outage tests need a server of their own")
	}
	opts := srv.Options()
	opts.ContextTimeoutEnabled = contextDeadline
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	s := New(client, WithPrefix(testPrefix(t)))
	if s.HonorsDeadline() != contextDeadline {
		t.Fatalf("HonorsDeadline() = %v with ContextTimeoutEnabled %v", s.HonorsDeadline(), contextDeadline)
	}
	var lims []*core.Limiter
	for _, m := range []core.FailMode{core.FailOpen, core.FailClosed} {
		p := core.Policy{Name: "outage-" + m.String(), Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second}
		l, err := core.NewLimiter(s, p, core.WithTimeout(outageTimeout), core.WithFailMode(m))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	for _, l := range lims {
		if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed || d.FailedOpen {
			t.Fatalf("before the outage: %+v, %v", d, err)
		}
	}
	return srv, lims
}

// checkFailing makes decisions through the outage: each returns within the
// timeout plus slack, with the FailMode's Decision and an error wrapping
// ErrStore (and ErrTimeout when wantTimeout).
func checkFailing(t *testing.T, lims []*core.Limiter, wantTimeout bool) {
	t.Helper()
	ctx := context.Background()
	var longest time.Duration
	var last error
	defer func() { t.Logf("longest decision %v; last error: %v", longest, last) }()
	for range 5 {
		for _, l := range lims {
			start := time.Now()
			d, err := l.Allow(ctx, "k")
			took := time.Since(start)
			longest, last = max(longest, took), err
			if took > outageTimeout+slack {
				t.Errorf("fail %s: decision took %v, bound %v", l.FailMode(), took, outageTimeout+slack)
			}
			if !errors.Is(err, core.ErrStore) {
				t.Fatalf("fail %s: err %v, want ErrStore", l.FailMode(), err)
			}
			if wantTimeout && !errors.Is(err, core.ErrTimeout) {
				t.Fatalf("fail %s: err %v, want ErrTimeout", l.FailMode(), err)
			}
			switch l.FailMode() {
			case core.FailOpen:
				if !d.Allowed || !d.FailedOpen {
					t.Fatalf("fail open: %+v, want Allowed and FailedOpen", d)
				}
			case core.FailClosed:
				if d.Allowed || d.FailedOpen || d.RetryAfter <= 0 {
					t.Fatalf("fail closed: %+v, want denied with a RetryAfter", d)
				}
			}
		}
	}
}

// waitRecovered polls, bounded, until every Limiter decides through Redis
// again.
func waitRecovered(t *testing.T, lims []*core.Limiter) {
	t.Helper()
	deadline := time.Now().Add(recoverWithin)
	for _, l := range lims {
		for {
			d, err := l.Allow(context.Background(), "k")
			if err == nil && d.Allowed && !d.FailedOpen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fail %s: not recovered after %v: %+v, %v", l.FailMode(), recoverWithin, d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestFrozenRedis: a Redis that accepts connections but never answers
// (SIGSTOP) cannot hold a decision beyond the Limiter's timeout, even with a
// client that ignores context deadlines on reads.
func TestFrozenRedis(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv, lims := outageLimiters(t, kind.contextDeadline)
			srv.Freeze()
			thawed := false
			t.Cleanup(func() {
				if !thawed {
					srv.Thaw()
				}
			})
			checkFailing(t, lims, true)
			srv.Thaw()
			thawed = true
			waitRecovered(t, lims)
		})
	}
}

// TestKilledRedis: a dead Redis fails decisions fast; once it is back on the
// same port, the same Limiter and client decide again by themselves.
func TestKilledRedis(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv, lims := outageLimiters(t, kind.contextDeadline)
			srv.Kill()
			// A refused connection is an error, not necessarily a timeout:
			// go-redis retries dials with a backoff, which the Limiter
			// usually cuts short.
			checkFailing(t, lims, false)
			srv.Restart()
			waitRecovered(t, lims)
		})
	}
}

// TestKilledRedisFallsBackToMemory: with core.WithFallback, a Limiter keeps
// limiting while Redis is dead, from this process's own counts, and goes
// back to Redis once it answers again.
func TestKilledRedisFallsBackToMemory(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("REDIS_URL is set: outage tests need a server of their own")
	}
	local := memstore.New()
	t.Cleanup(func() { _ = local.Close() })
	p := core.Policy{Name: "fallback", Algorithm: core.SlidingWindowLog, Limit: 3, Window: time.Hour}
	l, err := core.NewLimiter(New(srv.Client(), WithPrefix(testPrefix(t))), p,
		core.WithTimeout(outageTimeout), core.WithFailMode(core.FailOpen), core.WithFallback(local))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed || d.Fallback {
		t.Fatalf("before the outage: %+v, %v", d, err)
	}
	srv.Kill()
	for i := range 5 {
		d, err := l.Allow(ctx, "k")
		if !errors.Is(err, core.ErrStore) || !d.Fallback || d.FailedOpen {
			t.Fatalf("request %d during the outage: %+v, %v; want a fallback decision and ErrStore", i, d, err)
		}
		// The memory store has not seen the request Redis admitted: it
		// admits its own 3, then denies.
		if want := i < 3; d.Allowed != want {
			t.Fatalf("request %d during the outage: allowed %v, want %v (%+v)", i, d.Allowed, want, d)
		}
	}
	srv.Restart()
	deadline := time.Now().Add(recoverWithin)
	for {
		d, err := l.Allow(ctx, "k")
		if err == nil {
			// The restarted server kept nothing (no persistence), and
			// the memory store, which would deny, is no longer asked.
			if d.Fallback || !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after the outage: %+v; want Redis's fresh count (1 of 3 used)", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered after %v: %v", recoverWithin, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
