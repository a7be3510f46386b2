package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// switchStore is a CallDirect Store that fails while fail is set and
// otherwise admits; it counts its calls and the most that ran at once.
type switchStore struct {
	quietless
	calls, inflight, maxInflight atomic.Int32
	fail                         atomic.Bool
	err                          error // what it fails with; errDown when nil
}

func (s *switchStore) decide(context.Context, time.Time, core.Request) (core.Decision, time.Time, error) {
	s.calls.Add(1)
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for {
		m := s.maxInflight.Load()
		if n <= m || s.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	runtime.Gosched() // let other callers overlap, if the Limiter lets them
	if s.fail.Load() {
		if s.err != nil {
			return core.Decision{}, time.Time{}, s.err
		}
		return core.Decision{}, time.Time{}, errDown
	}
	return core.Decision{Allowed: true, Limit: 10, Remaining: 9}, time.Time{}, nil
}

func (*switchStore) Reset(context.Context, string, core.Policy) error { return nil }

func TestBreakerOpensThenProbes(t *testing.T) {
	for _, fc := range failConfigs {
		t.Run(fc.name, func(t *testing.T) {
			clock := &testClock{}
			s := &switchStore{}
			s.fail.Store(true)
			var opts []core.Option
			if fc.fallback {
				opts = append(opts, core.WithFallback(directStore{&fakeStore{answer: core.Decision{Allowed: true, Limit: 10, Remaining: 3}}}))
			}
			l, err := core.NewLimiter(s, []core.Policy{limitertest.Named(tb10, "", fc.failClosed)}, opts...)
			require.NoError(t, err)
			ctx := context.Background()
			checkFailed := func(d core.Decision, err error, open bool) {
				t.Helper()
				require.NoError(t, err)
				require.ErrorIs(t, d.Err, core.ErrStore)
				if open {
					require.ErrorIs(t, d.Err, limits.ErrCircuitOpen)
				} else {
					require.ErrorIs(t, d.Err, errDown)
					require.NotErrorIs(t, d.Err, limits.ErrCircuitOpen)
				}
				switch {
				case fc.fallback:
					assert.Equal(t, core.SourceFallback, d.Source)
					assert.True(t, d.Allowed, "%+v", d)
					assert.EqualValues(t, 3, d.Remaining)
				case fc.failClosed == 0:
					assert.Equal(t, core.SourceFailMode, d.Source)
					assert.True(t, d.Allowed, "%+v", d)
				default:
					assert.Equal(t, core.SourceFailMode, d.Source)
					assert.False(t, d.Allowed, "%+v", d)
					assert.Equal(t, time.Second, d.RetryAfter)
				}
				assert.Equal(t, limits.DefaultName(tb10.Algorithm, tb10.Limit, tb10.Window, tb10.Burst), d.Policy.Name)
			}

			// Three failures, each asking the store, open the breaker.
			for i := range 3 {
				// With a fallback, the first failure starts recovery.
				want := core.Healthy
				if fc.fallback && i > 0 {
					want = core.Recovering
				}
				assert.Equal(t, want, l.HealthAt(clock.now()), "after %d failures", i)
				d, err := l.AllowN(ctx, "k", 1, clock.now())
				checkFailed(d, err, false)
			}
			require.EqualValues(t, 3, s.calls.Load())
			assert.Equal(t, core.Failing, l.HealthAt(clock.now()))

			// Open: decided at once, the store left alone.
			for range 100 {
				d, err := l.AllowN(ctx, "k", 1, clock.now())
				checkFailed(d, err, true)
			}
			clock.advance((100 * time.Millisecond) - time.Millisecond)
			d, err := l.AllowN(ctx, "k", 1, clock.now())
			checkFailed(d, err, true)
			require.EqualValues(t, 3, s.calls.Load(), "the store was asked before the probe interval")

			// One probe per interval; a failed one keeps the breaker open.
			clock.advance(time.Millisecond)
			d, err = l.AllowN(ctx, "k", 1, clock.now())
			checkFailed(d, err, false)
			require.EqualValues(t, 4, s.calls.Load(), "no probe after the probe interval")
			d, err = l.AllowN(ctx, "k", 1, clock.now())
			checkFailed(d, err, true)
			require.EqualValues(t, 4, s.calls.Load(), "two probes in one interval")
			assert.Equal(t, core.Failing, l.HealthAt(clock.now()))

			// A probe the store answers closes the breaker at once, and
			// decides its own request.
			s.fail.Store(false)
			clock.advance((100 * time.Millisecond))
			d, err = l.AllowN(ctx, "k", 1, clock.now())
			require.NoError(t, err)
			assert.Equal(t, core.SourceStore, d.Source)
			assert.True(t, d.Allowed, "%+v", d)
			require.EqualValues(t, 5, s.calls.Load())
			for range 10 {
				_, err := l.AllowN(ctx, "k", 1, clock.now())
				require.NoError(t, err)
			}
			require.EqualValues(t, 15, s.calls.Load(), "a closed breaker left the store alone")
			if fc.fallback {
				assert.Equal(t, core.Recovering, l.HealthAt(clock.now()))
			} else {
				assert.Equal(t, core.Healthy, l.HealthAt(clock.now()))
			}
		})
	}
}

func TestBreakerCountsConsecutiveFailuresOnly(t *testing.T) {
	s := &switchStore{}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	ctx := context.Background()
	for _, fail := range []bool{true, true, false, true, true, false, true, true} {
		s.fail.Store(fail)
		_, _ = l.AllowN(ctx, "k", 1, time.Time{})
	}
	assert.Equal(t, core.Healthy, l.Health(), "a success in between did not reset the count")
	require.EqualValues(t, 8, s.calls.Load())
	s.fail.Store(true)
	d, err := l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, errDown)
	assert.Equal(t, core.Failing, l.Health())
}

// cancelingStore cancels its caller's context, as a disconnecting client
// does, and then fails, as go-redis does on a canceled context.
type cancelingStore struct{ calls atomic.Int32 }

type cancelFuncKey struct{}

func (s *cancelingStore) decide(ctx context.Context, now time.Time, _ core.Request) (core.Decision, time.Time, error) {
	s.calls.Add(1)
	ctx.Value(cancelFuncKey{}).(context.CancelFunc)()
	return core.Decision{}, time.Time{}, ctx.Err()
}
func (*cancelingStore) Reset(context.Context, string, core.Policy) error { return nil }

func (s *cancelingStore) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	_, err := s.Take(ctx, now, reqs, out)
	return err
}

func (s *cancelingStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	_, err := s.Take(ctx, at, reqs, make([]core.Decision, len(reqs)))
	return err
}

func TestBreakerIgnoresCancellationsAndInvalidInput(t *testing.T) {
	t.Run("canceled", func(t *testing.T) {
		s := &cancelingStore{}
		l, err := core.NewLimiter(s, []core.Policy{tb10})
		require.NoError(t, err)
		for range 10 {
			ctx, cancel := context.WithCancel(context.Background())
			_, err := l.AllowN(context.WithValue(ctx, cancelFuncKey{}, cancel), "k", 1, time.Time{})
			require.ErrorIs(t, err, context.Canceled)
		}
		require.EqualValues(t, 10, s.calls.Load())
		assert.Equal(t, core.Healthy, l.Health())
	})
	t.Run("invalid input", func(t *testing.T) {
		s := &switchStore{err: fmt.Errorf("%w: the store knows no such algorithm", core.ErrInvalidOption)}
		s.fail.Store(true)
		l, err := core.NewLimiter(s, []core.Policy{tb10})
		require.NoError(t, err)
		for range 10 {
			d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, core.ErrStore)
		}
		require.EqualValues(t, 10, s.calls.Load())
		assert.Equal(t, core.Healthy, l.Health())
	})
}

func TestBreakerCanBeTurnedOff(t *testing.T) {
	s := &switchStore{}
	s.fail.Store(true)
	l, err := core.NewLimiter(s, []core.Policy{tb10}, core.WithCircuitBreaker(0, time.Second))
	require.NoError(t, err)
	for range 20 {
		d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, errDown)
		require.NotErrorIs(t, d.Err, limits.ErrCircuitOpen)
	}
	require.EqualValues(t, 20, s.calls.Load())
	assert.Equal(t, core.Healthy, l.Health())
}

func TestBreakerCustomThreshold(t *testing.T) {
	clock := &testClock{}
	s := &switchStore{}
	s.fail.Store(true)
	l, err := core.NewLimiter(s, []core.Policy{tb10}, core.WithCircuitBreaker(1, time.Second))
	require.NoError(t, err)
	_, _ = l.AllowN(context.Background(), "k", 1, clock.now())
	assert.Equal(t, core.Failing, l.HealthAt(clock.now()))
	clock.advance(999 * time.Millisecond)
	d, err := l.AllowN(context.Background(), "k", 1, clock.now())
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrCircuitOpen)
	clock.advance(time.Millisecond)
	d, err = l.AllowN(context.Background(), "k", 1, clock.now())
	require.NoError(t, err)
	require.NotErrorIs(t, d.Err, limits.ErrCircuitOpen)
	require.EqualValues(t, 2, s.calls.Load())
}

func TestWithCircuitBreakerRejectsBadValues(t *testing.T) {
	for _, tt := range []struct {
		failures int
		interval time.Duration
	}{
		{-1, time.Second},
		{3, 0},
		{3, -time.Second},
		{3, time.Microsecond},
		{0, -time.Second},
		{1 << 31, time.Second},
	} {
		l, err := core.NewLimiter(&fakeStore{}, []core.Policy{tb10}, core.WithCircuitBreaker(tt.failures, tt.interval))
		require.ErrorIs(t, err, core.ErrInvalidOption, "WithCircuitBreaker(%d, %v)", tt.failures, tt.interval)
		require.Nil(t, l)
	}
	_, err := core.NewLimiter(&fakeStore{}, []core.Policy{tb10}, core.WithCircuitBreaker(1<<31-1, time.Millisecond))
	require.NoError(t, err)
}

// TestBreakerOneProbeAtATime hammers an open breaker from many goroutines
// while the clock runs: never two calls to the store at once, never more
// probes than intervals.
func TestBreakerOneProbeAtATime(t *testing.T) {
	clock := &testClock{}
	s := &switchStore{}
	s.fail.Store(true)
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	ctx := context.Background()
	for range 3 {
		_, _ = l.AllowN(ctx, "k", 1, clock.now())
	}
	require.Equal(t, core.Failing, l.HealthAt(clock.now()))
	s.calls.Store(0)
	const goroutines, calls = 8, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				clock.advance(time.Millisecond)
				d, err := l.AllowN(ctx, "k", 1, clock.now())
				if !assert.NoError(t, err) || !assert.ErrorIs(t, d.Err, limits.ErrStore) || !assert.Equal(t, core.SourceFailMode, d.Source) {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Duration(clock.ns.Load())
	assert.EqualValues(t, 1, s.maxInflight.Load(), "probes overlapped")
	probes, most := s.calls.Load(), int32(elapsed/(100*time.Millisecond))+1
	assert.LessOrEqual(t, probes, most, "%d probes in %v", probes, elapsed)
	assert.Positive(t, probes)
	assert.Equal(t, core.Failing, l.HealthAt(clock.now()))
}

// TestRecoveringLastsTheHorizon: with a fallback, the Limiter stays
// Recovering after an outage until the state from the outage can no
// longer matter, and the fallback's refusals hold meanwhile. The explicit
// times run from 2030 and from 1960, before the Unix epoch, where the
// breaker's times are negative.
func TestRecoveringLastsTheHorizon(t *testing.T) {
	for _, tt := range []struct {
		p       core.Policy
		horizon time.Duration
	}{
		{core.Policy{Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}, time.Minute},
		{core.Policy{Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Minute}, time.Minute},
		{core.Policy{Algorithm: core.SlidingWindowCounter, Limit: 2, Window: time.Minute}, 2 * time.Minute},
		{core.Policy{Algorithm: core.TokenBucket, Limit: 2, Window: time.Minute, Burst: 6}, 3 * time.Minute},
		{core.Policy{Algorithm: core.LeakyBucket, Limit: 4, Window: time.Minute, Burst: 2}, 30 * time.Second},
	} {
		for _, start := range []time.Time{t0, time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)} {
			t.Run(fmt.Sprintf("%s/%d", tt.p.Algorithm, start.Year()), func(t *testing.T) {
				s := &switchStore{}
				local := newMemStore(t)
				l, err := core.NewLimiter(s, []core.Policy{tt.p}, core.WithFallback(local), core.WithCircuitBreaker(0, time.Second))
				require.NoError(t, err)
				ctx := context.Background()
				s.fail.Store(true)
				d, err := l.AllowN(ctx, "k", 1, start)
				require.NoError(t, err)
				require.ErrorIs(t, d.Err, limits.ErrStore)
				require.Equal(t, core.SourceFallback, d.Source)
				require.True(t, d.Allowed, "%+v", d)
				assert.Equal(t, core.Recovering, l.HealthAt(start), "the store failed; the fallback decided")
				s.fail.Store(false)
				assert.Equal(t, core.Recovering, l.HealthAt(start.Add(tt.horizon-time.Millisecond)))
				assert.Equal(t, core.Healthy, l.HealthAt(start.Add(tt.horizon)))
			})
		}
	}
}

// Take decides one request at a time: the fake has no layers.
func (s *switchStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return takeOne(ctx, now, reqs, out, s.decide)
}

// Take decides one request at a time: the fake has no layers.
func (s *cancelingStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return takeOne(ctx, now, reqs, out, s.decide)
}
