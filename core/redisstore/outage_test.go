package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// outageTimeout is the Limiter's timeout in the outage tests.
const outageTimeout = 50 * time.Millisecond

var (
	// slack is what a decision may take beyond the timeout: scheduling,
	// the race detector, a loaded machine. A correctness bound, not a
	// benchmark: it tells the Limiter's timeout from the client's own
	// (a default go-redis client waits 3s on a frozen server), and a busy
	// 2-core machine can stall a process for a good part of a second;
	// scaled, as a deadline (testwait).
	slack = testwait.D(time.Second)
	// recoverWithin bounds the wait for decisions to succeed again.
	recoverWithin = testwait.D(15 * time.Second)
)

// clientKinds are the go-redis clients the outage tests run with: default
// options (ContextTimeoutEnabled false, ReadTimeout 3s), which the Limiter
// bounds with a goroutine of its own, and ContextTimeoutEnabled, which it
// calls directly with its timeout as the deadline (Store.honoursDeadline).
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
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	if got := s.honoursDeadline(); got != contextDeadline {
		t.Fatalf("honoursDeadline() = %v with ContextTimeoutEnabled %v", got, contextDeadline)
	}
	var lims []*core.Limiter
	for _, fc := range []time.Duration{0, time.Second} { // fail open, fail closed
		p := core.Policy{Name: "outage-" + failName(fc), Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second, FailClosed: fc}
		l, err := core.NewLimiter(within(s, outageTimeout), []core.Policy{p})
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	// Dial and load the scripts first, unhurried: a fresh client's first
	// decision (a dial, NOSCRIPT, then EVAL) may take longer than
	// outageTimeout on a loaded machine, which is not what these tests
	// are about.
	wctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	for _, l := range lims {
		if _, _, err := take1(s, wctx, time.Time{}, core.Request{Key: "warm-up", Policy: l.Policies()[0], Cost: 1}); err != nil {
			t.Fatalf("warming up: %v", err)
		}
	}
	// Before the outage, every Limiter decides through Redis: polled, as
	// even a warm decision may outlast outageTimeout on a busy machine.
	waitRecovered(t, lims)
	return srv, lims
}

// checkFailing makes decisions through the outage: each returns within the
// timeout plus slack, with no error and the fail mode's Decision, its Err
// wrapping ErrStore (and a timeout when wantTimeout, until the circuit
// breaker opens and ErrCircuitOpen takes its place).
func checkFailing(t *testing.T, lims []*core.Limiter, wantTimeout bool) {
	t.Helper()
	ctx := context.Background()
	var longest time.Duration
	var last error
	defer func() { t.Logf("longest decision %v; last error: %v", longest, last) }()
	for range 5 {
		for _, l := range lims {
			start := time.Now()
			d, err := l.AllowN(ctx, "k", 1, time.Time{})
			took := time.Since(start)
			longest, last = max(longest, took), d.Err
			mode := failName(l.Policies()[0].FailClosed)
			if took > outageTimeout+slack {
				t.Errorf("fail %s: decision took %v, bound %v", mode, took, outageTimeout+slack)
			}
			if err != nil {
				t.Fatalf("fail %s: err %v, want nil: a decision was made", mode, err)
			}
			if !errors.Is(d.Err, limits.ErrStore) {
				t.Fatalf("fail %s: Err %v, want ErrStore", mode, d.Err)
			}
			if wantTimeout && !isTimeout(d.Err) && !errors.Is(d.Err, limits.ErrCircuitOpen) {
				t.Fatalf("fail %s: Err %v, want a timeout or ErrCircuitOpen", mode, d.Err)
			}
			switch mode {
			case "open":
				if !d.Allowed || d.Source != core.SourceFailMode {
					t.Fatalf("fail open: %+v, want Allowed by the fail mode", d)
				}
			case "closed":
				if d.Allowed || d.Source != core.SourceFailMode || d.RetryAfter <= 0 {
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
			d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
			if err == nil && d.Allowed && d.Source == core.SourceStore {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fail %s: not recovered after %v: %+v, %v", failName(l.Policies()[0].FailClosed), recoverWithin, d, err)
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
// limiting while Redis is dead, from this process's own counts (which
// include what Redis admitted before), and goes back to Redis once it
// answers, the fallback still vouching for each admission until the
// outage's state no longer matters.
func TestKilledRedisFallsBackToMemory(t *testing.T) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("REDIS_URL is set: outage tests need a server of their own")
	}
	local := newMemStore(t)
	p := core.Policy{Name: "fallback", Algorithm: core.SlidingWindowLog, Limit: 3, Window: time.Hour}
	s := mustNew(t, srv.Client(), WithPrefix(testPrefix(t)))
	l, err := core.NewLimiter(within(s, outageTimeout), []core.Policy{p}, core.WithFallback(local))
	if err != nil {
		t.Fatal(err)
	}
	// Before the outage, Redis admits a request, which the fallback
	// mirrors: through a Limiter of its own over the same stores and
	// policy, with a generous timeout (aloneTimeout), since a healthy first
	// decision (a dial, the script's load) may outlast outageTimeout on a
	// busy machine.
	healthy, err := core.NewLimiter(alone(s), []core.Policy{p}, core.WithFallback(local))
	require.NoError(t, err)
	ctx := context.Background()
	if d, err := healthy.AllowN(ctx, "k", 1, time.Time{}); err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("before the outage: %+v, %v", d, err)
	}
	srv.Kill()
	for i := range 5 {
		d, err := l.AllowN(ctx, "k", 1, time.Time{})
		if err != nil || !errors.Is(d.Err, limits.ErrStore) || d.Source != core.SourceFallback {
			t.Fatalf("request %d during the outage: %+v, %v; want a fallback decision, its Err wrapping ErrStore", i, d, err)
		}
		// The memory store has seen the request Redis admitted: it
		// admits 2 more, then denies.
		if want := i < 2; d.Allowed != want {
			t.Fatalf("request %d during the outage: allowed %v, want %v (%+v)", i, d.Allowed, want, d)
		}
	}
	require.Equal(t, core.Failing, l.Health())
	srv.Restart()
	deadline := time.Now().Add(recoverWithin)
	for {
		d, err := l.AllowN(ctx, "k", 1, time.Time{})
		require.NoError(t, err)
		if d.Err == nil {
			// The restarted server kept nothing (no persistence) and
			// admits; the memory store, which counted the 3 admissions of
			// the hour, refuses.
			require.False(t, d.Allowed, "after the outage: %+v; a 4th admission of 3 per hour", d)
			require.Equal(t, core.SourceFallback, d.Source, "%+v", d)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered after %v: %v", recoverWithin, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, core.Recovering, l.Health())
}

// TestBreakerSparesTheTimeout is issue #6 item 12: once Redis is known to
// be down, decisions no longer wait for it. Frozen (SIGSTOP) or killed,
// with either client kind: of 100 decisions at most a few ask Redis, and
// so may pay the timeout (the failures that open the breaker, a probe),
// counted by the commands sent; and a stream of decisions
// sends Redis at most one probe per probe interval. Once Redis is back,
// decisions go back to it by themselves (the first probe it answers).
func TestBreakerSparesTheTimeout(t *testing.T) {
	for _, outage := range []string{"frozen", "killed"} {
		for _, kind := range clientKinds {
			t.Run(outage+"/"+kind.name, func(t *testing.T) {
				srv := redistest.Start(t)
				if srv.External() {
					t.Skip("REDIS_URL is set: outage tests need a server of their own")
				}
				opts := srv.Options()
				opts.ContextTimeoutEnabled = kind.contextDeadline
				client := redis.NewClient(opts)
				t.Cleanup(func() { _ = client.Close() })
				counter := newCommandCounter()
				client.AddHook(counter)
				p := core.Policy{Name: "breaker", Algorithm: core.TokenBucket, Limit: 100_000, Window: time.Second}
				st := mustNew(t, client, WithPrefix(testPrefix(t)))
				waitChecked(t, st, 10*time.Second) // its INFO must not count below
				l, err := core.NewLimiter(within(st, outageTimeout), []core.Policy{p})
				require.NoError(t, err)
				ctx := context.Background()
				// The first decision loads the script; on a loaded machine
				// it may take longer than the timeout.
				require.Eventually(t, func() bool {
					d, err := l.AllowN(ctx, "k", 1, time.Time{})
					return err == nil && d.Err == nil && d.Allowed
				}, recoverWithin, 10*time.Millisecond, "Redis never decided")
				require.Equal(t, core.Healthy, l.Health())

				down := false
				if outage == "frozen" {
					srv.Freeze()
					t.Cleanup(func() {
						if down {
							srv.Thaw()
						}
					})
				} else {
					srv.Kill()
				}
				down = true
				counter.reset()
				slow := 0
				for range 100 {
					start := time.Now()
					d, err := l.AllowN(ctx, "k", 1, time.Time{})
					if time.Since(start) >= outageTimeout/2 {
						slow++
					}
					require.NoError(t, err)
					require.ErrorIs(t, d.Err, limits.ErrStore)
					require.Equal(t, core.SourceFailMode, d.Source, "%+v", d)
					require.True(t, d.Allowed, "%+v", d)
				}
				require.Equal(t, core.Failing, l.Health())
				names, _ := counter.snapshot()
				// Only a decision that asks Redis can pay the timeout: the
				// commands sent are the count that must stay small (the
				// failures that open the breaker, a probe). How many
				// decisions were slow is a wall-clock figure, which a busy
				// machine inflates: logged, not asserted.
				t.Logf("100 decisions: %d took %v or more, Redis was sent %v", slow, outageTimeout/2, names)
				assert.LessOrEqual(t, names["evalsha"]+names["eval"], 3+2)

				// A steady stream for a while: one probe per interval at
				// most, however many decisions.
				counter.reset()
				start, decisions := time.Now(), 0
				for time.Since(start) < 5*(100*time.Millisecond) {
					d, err := l.AllowN(ctx, "k", 1, time.Time{})
					require.NoError(t, err)
					require.ErrorIs(t, d.Err, limits.ErrStore)
					decisions++
					time.Sleep(time.Millisecond)
				}
				names, _ = counter.snapshot()
				probes := names["evalsha"] + names["eval"]
				t.Logf("%d decisions in %v: %d probes", decisions, time.Since(start), probes)
				// One probe per interval, plus the one at the start; and
				// up to two more on a busy machine: over the default
				// client, commands the Limiter gave up on before the reset
				// (a batch still dialing a killed server, and the one
				// queued behind it) may reach the counter after it. A
				// breaker that did not hold probes back would send one
				// per decision, over 200.
				assert.LessOrEqual(t, probes, int(time.Since(start)/(100*time.Millisecond))+3)

				if outage == "frozen" {
					srv.Thaw()
				} else {
					srv.Restart()
				}
				down = false
				back := time.Now()
				for {
					d, err := l.AllowN(ctx, "k", 1, time.Time{})
					require.NoError(t, err)
					if d.Err == nil {
						require.Equal(t, core.SourceStore, d.Source, "%+v", d)
						require.True(t, d.Allowed, "%+v", d)
						break
					}
					// A probe per interval, each of which may outlast
					// outageTimeout on a busy machine: a generous bound.
					require.Less(t, time.Since(back), recoverWithin, "decisions not back to Redis %v after it was: %v", recoverWithin, d.Err)
					time.Sleep(5 * time.Millisecond)
				}
				t.Logf("back to Redis %v after it was", time.Since(back))
				assert.Equal(t, core.Healthy, l.Health())
			})
		}
	}
}

// TestResetIsBoundedOnFrozenRedis is issue #6 item 7: Reset waits no more
// than the Limiter's timeout for a frozen Redis, even with a client whose
// reads ignore context deadlines (go-redis defaults: 3 s).
func TestResetIsBoundedOnFrozenRedis(t *testing.T) {
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
			for _, l := range lims {
				start := time.Now()
				err := l.Reset(context.Background(), "k")
				took := time.Since(start)
				require.Less(t, took, outageTimeout+slack, "Reset took %v", took)
				require.ErrorIs(t, err, limits.ErrStore)
				require.True(t, isTimeout(err), "%v", err)
			}
			srv.Thaw()
			thawed = true
			// Thawed, Reset works again: polled, as a healthy Reset may
			// outlast outageTimeout on a busy machine.
			for _, l := range lims {
				var err error
				require.Eventually(t, func() bool {
					err = l.Reset(context.Background(), "k")
					return err == nil
				}, recoverWithin, 10*time.Millisecond, "Reset after the thaw: %v", &err)
			}
		})
	}
}

// TestFallbackBoundsAFlappingRedis is issue #6 item 8 on a real server: a
// Redis frozen and thawed again and again must not let one process admit
// more than its limit, whatever the client: the fallback counts every
// admission, Redis's and its own.
func TestFallbackBoundsAFlappingRedis(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.Start(t)
			if srv.External() {
				t.Skip("REDIS_URL is set: outage tests need a server of their own")
			}
			opts := srv.Options()
			opts.ContextTimeoutEnabled = kind.contextDeadline
			client := redis.NewClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			local := newMemStore(t)
			const limit = 10
			p := core.Policy{Name: "flap", Algorithm: core.SlidingWindowLog, Limit: limit, Window: time.Hour}
			s := mustNew(t, client, WithPrefix(testPrefix(t)))
			l, err := core.NewLimiter(within(s, outageTimeout), []core.Policy{p}, core.WithFallback(local))
			require.NoError(t, err)
			ctx := context.Background()
			frozen := false
			t.Cleanup(func() {
				if frozen {
					srv.Thaw()
				}
			})
			admitted, byRedis := 0, 0
			attempt := func(n int) {
				for range n {
					d, err := l.AllowN(ctx, "client", 1, time.Time{})
					require.NotEqual(t, core.SourceFailMode, d.Source, "%+v, %v", d, err)
					require.NoError(t, err)
					if d.Allowed {
						admitted++
						if d.Err == nil {
							byRedis++
						}
					}
				}
			}
			// Redis admits 4 (unless a decision times out on a loaded
			// machine: the fallback then admits it); frozen, the fallback
			// admits the other 6; thawed, Redis would admit again but the
			// fallback refuses.
			// Dial and load the script first, unhurried (outageTimeout is
			// for the freezes).
			wctx, cancel := context.WithTimeout(ctx, limitertest.StoreTimeout)
			defer cancel()
			_, _, err = take1(s, wctx, time.Time{}, core.Request{Key: "warm-up", Policy: p, Cost: 1})
			require.NoError(t, err)
			attempt(4)
			for range 3 {
				srv.Freeze()
				frozen = true
				attempt(10)
				srv.Thaw()
				frozen = false
				attempt(10)
			}
			assert.Equal(t, limit, admitted, "admitted %d of a limit of %d (%d by Redis)", admitted, limit, byRedis)
			assert.Positive(t, byRedis, "Redis admitted nothing: the test tested only the fallback")
		})
	}
}

// cancelKey carries, in a caller's context, the cancel function that
// cancelHook calls just before a command goes to Redis: a client that
// disconnects while its decision is in flight.
type cancelKey struct{}

// cancelHook cancels the caller's context mid-call (the Limiter passes the
// caller's values on to the store).
type cancelHook struct{}

func (cancelHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (cancelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
			cancel()
		}
		return next(ctx, cmd)
	}
}

func (cancelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCanceledCallerIsNeverAllowed is the disconnect bypass of issue #6: a
// client that closes its connection cancels the request's context. Before
// the store is called, or during a call to a live or frozen Redis, with a
// default client and a ContextTimeoutEnabled one, under fail open, fail
// closed and a fallback, that must never admit a request the store did not
// admit: against 2 per hour, 30 such requests get at most 2 admissions, and
// never one by the fail mode (open) or the fallback.
func TestCanceledCallerIsNeverAllowed(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.Start(t)
			if srv.External() {
				t.Skip("REDIS_URL is set: this test freezes a server of its own")
			}
			opts := srv.Options()
			opts.ContextTimeoutEnabled = kind.contextDeadline
			client := redis.NewClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			counter := newCommandCounter()
			client.AddHook(counter)
			client.AddHook(cancelHook{})
			s := mustNew(t, client, WithPrefix(testPrefix(t)))
			waitChecked(t, s, 10*time.Second) // its INFO must not count below
			local := newMemStore(t)

			configs := []struct {
				name string
				opts []core.Option
			}{
				{"fail-open", nil},
				{"fail-closed", nil}, // the policy fails closed (below)
				{"fallback", []core.Option{core.WithFallback(local)}},
			}
			limiters := func(timeout time.Duration) []*core.Limiter {
				lims := make([]*core.Limiter, len(configs))
				for i, c := range configs {
					p := core.Policy{Name: "cancel-" + c.name, Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Hour}
					if c.name == "fail-closed" {
						p.FailClosed = time.Second
					}
					l, err := core.NewLimiter(within(s, timeout), []core.Policy{p}, c.opts...)
					require.NoError(t, err)
					lims[i] = l
				}
				return lims
			}
			// Generous: on a live server, a timeout would be a genuine
			// (fail-open) store failure.
			lims := limiters(limitertest.StoreTimeout)
			admitted := make([]int, len(lims))
			check := func(i int, phase string, d core.Decision, err error) {
				t.Helper()
				require.False(t, d.Source == core.SourceFallback || d.Source == core.SourceFailMode && d.Allowed, "%s %s: %+v, %v", configs[i].name, phase, d, err)
				if err != nil {
					require.ErrorIs(t, err, context.Canceled, "%s %s", configs[i].name, phase)
					require.False(t, d.Allowed, "%s %s: a canceled request was admitted: %+v", configs[i].name, phase, d)
				}
				if d.Allowed {
					admitted[i]++
				}
			}

			// Canceled before the call: Redis is not even asked.
			counter.reset()
			for range 30 {
				for i, l := range lims {
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					d, err := l.AllowN(ctx, "gone", 1, time.Time{})
					check(i, "canceled before", d, err)
					require.ErrorIs(t, err, context.Canceled)
				}
			}
			names, _ := counter.snapshot()
			assert.Empty(t, names, "Redis was asked about callers that had gone")

			// Canceled mid-call on a live server: Redis decides (or the
			// Limiter stops waiting), never the fail mode.
			for range 30 {
				for i, l := range lims {
					ctx, cancel := context.WithCancel(context.Background())
					ctx = context.WithValue(ctx, cancelKey{}, cancel)
					d, err := l.AllowN(ctx, "gone", 1, time.Time{})
					check(i, "canceled mid-call", d, err)
					cancel()
				}
			}
			for i := range lims {
				assert.LessOrEqual(t, admitted[i], 2, "%s: admissions past the limit of 2", configs[i].name)
			}

			// Canceled mid-call on a frozen server: no decision, so no
			// admission.
			srv.Freeze()
			thawed := false
			t.Cleanup(func() {
				if !thawed {
					srv.Thaw()
				}
			})
			// Short: a ContextTimeoutEnabled client waits for it.
			for range 3 {
				for i, l := range limiters(outageTimeout) {
					ctx, cancel := context.WithCancel(context.Background())
					ctx = context.WithValue(ctx, cancelKey{}, cancel)
					d, err := l.AllowN(ctx, "gone-frozen", 1, time.Time{})
					check(i, "canceled on a frozen server", d, err)
					require.ErrorIs(t, err, context.Canceled, "%s frozen: %+v", configs[i].name, d)
					cancel()
				}
			}
			srv.Thaw()
			thawed = true
		})
	}
}

// failName names a policy's fail mode by its FailClosed.
func failName(failClosed time.Duration) string {
	if failClosed > 0 {
		return "closed"
	}
	return "open"
}

// isTimeout reports whether err, a store failure, is a timeout.
func isTimeout(err error) bool { return outcome.StoreErrorKind(err) == outcome.StoreErrTimeout }
