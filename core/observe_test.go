package core_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// recorder is an Observer that keeps every event, keys copied.
type recorder struct {
	mu     sync.Mutex
	events []core.Event
}

func (r *recorder) Bind(*core.Limiter) (func(core.Event), error) { return r.Observe, nil }

// outcomeOf is the outcome of e.
func outcomeOf(e core.Event) outcome.Outcome { return outcome.Of(&e.Decision) }

func (r *recorder) Observe(e core.Event) {
	e.Key = strings.Clone(e.Key)
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// last returns the newest event, failing t if there is none.
func (r *recorder) last(t *testing.T) core.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.events)
	return r.events[len(r.events)-1]
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func TestObserverHearsTheStoresOutcomes(t *testing.T) {
	rec := &recorder{}
	p := core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(rec), core.WithDenyCache(10))
	require.NoError(t, err)
	ctx := context.Background()

	// Remaining after each admission: 2, 1, 0; near the limit (under a
	// fifth of 3) only at 0.
	for i, near := range []bool{false, false, true} {
		d, err := l.AllowN(ctx, "203.0.113.7", 1, t0)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		e := rec.last(t)
		assert.Equal(t, outcome.Allowed, outcome.Of(&e.Decision), "request %d", i)
		assert.Equal(t, near, outcome.NearLimit(&e.Decision), "request %d", i)
		assert.Equal(t, "login", e.Policy.Name)
		assert.Equal(t, "203.0.113.7", e.Key)
		assert.Equal(t, int64(1), e.Cost)
		assert.Equal(t, d, e.Decision)
		assert.NoError(t, e.Err)
	}
	_, err = l.AllowN(ctx, "203.0.113.7", 1, t0)
	require.NoError(t, err)
	denied := rec.last(t)
	assert.Equal(t, outcome.Denied, outcome.Of(&denied.Decision))
	assert.False(t, outcome.NearLimit(&denied.Decision), "a denial is not near the limit: it is past it")

	_, err = l.AllowN(ctx, "203.0.113.7", 1, t0.Add(time.Second))
	require.NoError(t, err)
	e := rec.last(t)
	assert.Equal(t, outcome.DenyCache, outcome.Of(&e.Decision))
	assert.Zero(t, e.StoreLatency, "the store was not asked")

	_, err = l.AllowN(ctx, "203.0.113.7", 0, t0)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	e = rec.last(t)
	assert.Equal(t, outcome.Invalid, outcome.Of(&e.Decision))
	assert.Equal(t, int64(0), e.Cost)
	assert.ErrorIs(t, e.Err, core.ErrInvalidOption)
	assert.Equal(t, "login", e.Policy.Name, "an invalid call still names its limit")

	_, err = l.AllowN(ctx, "", 1, t0)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.Equal(t, outcome.Invalid, outcomeOf(rec.last(t)))
	assert.Empty(t, rec.last(t).Key)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.AllowN(canceled, "198.51.100.1", 1, t0)
	require.ErrorIs(t, err, context.Canceled)
	e = rec.last(t)
	assert.Equal(t, outcome.Canceled, outcome.Of(&e.Decision))
	assert.Equal(t, "198.51.100.1", e.Key)
	assert.Empty(t, outcome.StoreErrorKind(e.Err), "a caller that left is no store failure")

	long := strings.Repeat("k", limits.MaxKeyLen+1)
	_, err = l.AllowN(ctx, long, 1, t0)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(rec.last(t).Key, "sha256:"), "observers see the key the store sees: %q", rec.last(t).Key)
	assert.Equal(t, 9, rec.len(), "one event a call")
}

func TestObserverHearsFailures(t *testing.T) {
	p := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		failClosed time.Duration
		fallback   core.Decision
		want       outcome.Outcome
	}{
		{name: "fail-open", want: outcome.FailedOpen},
		{name: "fail-closed", failClosed: time.Second, want: outcome.FailedClosed},
		{name: "fallback-allows", fallback: core.Decision{Allowed: true, Limit: 10, Remaining: 1}, want: outcome.FallbackAllowed},
		{name: "fallback-denies", fallback: core.Decision{Limit: 10, RetryAfter: time.Second}, want: outcome.FallbackDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			s := &switchStore{}
			s.fail.Store(true)
			opts := []core.Option{core.WithObserver(rec)}
			p := p
			p.FailClosed = c.failClosed
			if c.name == "fallback-allows" || c.name == "fallback-denies" {
				opts = append(opts, core.WithFallback(directStore{&fakeStore{answer: c.fallback}}))
			}
			l, err := core.NewLimiter(s, []core.Policy{p}, opts...)
			require.NoError(t, err)
			// Three failures open the default breaker; the fourth call
			// does not reach the store.
			for i := range 4 {
				d, err := l.AllowN(ctx, "k", 1, t0)
				require.NoError(t, err)
				require.ErrorIs(t, d.Err, limits.ErrStore)
				e := rec.last(t)
				assert.Equal(t, c.want, outcome.Of(&e.Decision), "call %d", i)
				assert.Equal(t, d, e.Decision)
				assert.Equal(t, c.want == outcome.FallbackAllowed, outcome.NearLimit(&e.Decision), "call %d: near limit only for a fallback admission leaving 1 of 10", i)
				if i < 3 {
					assert.Equal(t, outcome.StoreErrFailed, outcome.StoreErrorKind(e.Err), "call %d", i)
				} else {
					assert.Equal(t, outcome.StoreErrCircuitOpen, outcome.StoreErrorKind(e.Err), "call %d", i)
					assert.Zero(t, e.StoreLatency, "an open breaker does not ask the store")
				}
			}
			assert.Equal(t, int32(3), s.calls.Load())
		})
	}
}

func TestObserverTimesAStoreThatMayBlock(t *testing.T) {
	rec := &recorder{}
	const timeout = 20 * time.Millisecond
	g := &fakeStore{release: make(chan struct{}), timeout: timeout} // frozen: gives up after its timeout
	t.Cleanup(func() { close(g.release) })
	p := core.Policy{Name: "slow", Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
	l, err := core.NewLimiter(g, []core.Policy{p}, core.WithObserver(rec))
	require.NoError(t, err)
	d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, context.DeadlineExceeded)
	e := rec.last(t)
	assert.Equal(t, outcome.FailedOpen, outcome.Of(&e.Decision))
	assert.Equal(t, outcome.StoreErrTimeout, outcome.StoreErrorKind(e.Err))
	assert.GreaterOrEqual(t, e.StoreLatency, timeout, "the time the Limiter waited")

	// A store that answers is timed on every decision.
	rec2 := &recorder{}
	fast := &fakeStore{answer: core.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	l2, err := core.NewLimiter(fast, []core.Policy{p}, core.WithObserver(rec2))
	require.NoError(t, err)
	for range 20 {
		_, err := l2.AllowN(context.Background(), "k", 1, time.Time{})
		require.NoError(t, err)
		assert.Positive(t, rec2.last(t).StoreLatency)
	}
}

func TestObserverDoesNotTimeADirectStore(t *testing.T) {
	timed := 0
	count := limitertest.Observer(func(e core.Event) {
		if e.StoreLatency != 0 {
			timed++
		}
	})
	p := core.Policy{Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(count))
	require.NoError(t, err)
	for range 1000 {
		_, err := l.AllowN(context.Background(), "k", 1, time.Time{})
		require.NoError(t, err)
	}
	assert.Zero(t, timed, "a memory store never waits: its decisions are not timed")
}

// binder counts its Binds and hands out an observer per Limiter.
type binder struct {
	recorder
	err         error
	bound       []*core.Limiter
	nilObserver bool
}

func (b *binder) Bind(l *core.Limiter) (func(core.Event), error) {
	if b.err != nil {
		return nil, b.err
	}
	b.bound = append(b.bound, l)
	if b.nilObserver {
		return nil, nil
	}
	name := l.Policies()[0].Name
	return func(e core.Event) {
		e.Policy.Name = "bound:" + name
		b.Observe(e)
	}, nil
}

func TestBinderIsBoundOncePerLimiter(t *testing.T) {
	b := &binder{}
	s := newMemStore(t)
	mk := func(name string) *core.Limiter {
		l, err := core.NewLimiter(s, []core.Policy{{Name: name, Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}}, core.WithObserver(b))
		require.NoError(t, err)
		return l
	}
	a, c := mk("a"), mk("c")
	require.Equal(t, []*core.Limiter{a, c}, b.bound)
	_, err := a.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	_, err = c.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, "bound:a", b.events[0].Policy.Name)
	assert.Equal(t, "bound:c", b.events[1].Policy.Name)
	assert.Len(t, b.bound, 2, "no Bind per decision")
}

func TestObserverOptionErrors(t *testing.T) {
	s := newMemStore(t)
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}
	_, err := core.NewLimiter(s, []core.Policy{p}, core.WithObserver(nil))
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	boom := errors.New("duplicate limit name")
	_, err = core.NewLimiter(s, []core.Policy{p}, core.WithObserver(&binder{err: boom}))
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.ErrorIs(t, err, boom)
	_, err = core.NewLimiter(s, []core.Policy{p}, core.WithObserver(&binder{nilObserver: true}))
	assert.ErrorIs(t, err, core.ErrInvalidOption)
}

func TestObserversHearEveryEventInOrder(t *testing.T) {
	var got []string
	mk := func(name string) core.Observer {
		return limitertest.Observer(func(e core.Event) { got = append(got, fmt.Sprintf("%s:%s", name, outcome.Of(&e.Decision))) })
	}
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(mk("a")), core.WithObserver(mk("b")))
	require.NoError(t, err)
	for range 2 {
		_, err := l.AllowN(context.Background(), "k", 1, time.Time{})
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"a:allowed", "b:allowed", "a:denied", "b:denied"}, got)
}

func TestOutcomeNames(t *testing.T) {
	want := []string{"allowed", "denied", "deny_cache", "fallback_allowed", "fallback_denied", "failed_open", "failed_closed", "canceled", "invalid",
		"shadow_denied", "locked_out", "allow_listed", "deny_listed"}
	var names []string
	for _, o := range outcome.All() {
		names = append(names, o.String())
	}
	assert.Equal(t, want, names)
	var admitted []string
	for _, o := range outcome.All() {
		if o.Admitted() {
			admitted = append(admitted, o.String())
		}
	}
	assert.Equal(t, []string{"allowed", "fallback_allowed", "failed_open", "shadow_denied", "allow_listed"}, admitted)
	assert.Equal(t, "Outcome(200)", outcome.Outcome(200).String())
}

func TestStoreErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{core.ErrInvalidOption, ""},
		{fmt.Errorf("%w: %w", context.Canceled, context.Canceled), ""},
		{fmt.Errorf("%w: %w", limits.ErrStore, errDown), outcome.StoreErrFailed},
		{fmt.Errorf("%w: %w", limits.ErrStore, limits.ErrCircuitOpen), outcome.StoreErrCircuitOpen},
		{fmt.Errorf("%w: %w after 100ms", limits.ErrStore, context.DeadlineExceeded), outcome.StoreErrTimeout},
	} {
		assert.Equal(t, c.want, outcome.StoreErrorKind(c.err), "%v", c.err)
	}
}

func TestObservedDecisionDoesNotAllocate(t *testing.T) {
	var n int
	obs := limitertest.Observer(func(e core.Event) {
		if outcome.Of(&e.Decision) == outcome.Allowed {
			n++
		}
	})
	p := core.Policy{Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{p}, core.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()
	_, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{})
	allocs := testing.AllocsPerRun(1000, func() { _, _ = l.AllowN(ctx, "203.0.113.7", 1, time.Time{}) })
	assert.Zero(t, allocs)
	assert.Positive(t, n)
}

// socketDeadlineStore fails as go-redis does on a frozen server: its
// socket deadline is the context's, and it returns its own i/o timeout as
// soon as that instant has passed, whether or not the context's timer has
// fired yet.
type socketDeadlineStore struct{ quietless }

// errIOTimeout is what a socket read past its deadline fails with.
var errIOTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func (socketDeadlineStore) decide(ctx context.Context, now time.Time, _ core.Request) (core.Decision, time.Time, error) {
	time.Sleep(5 * time.Millisecond) // its own timeout, set on the socket
	return core.Decision{}, time.Time{}, errIOTimeout
}
func (socketDeadlineStore) Reset(context.Context, string, core.Policy) error { return nil }

func TestSocketDeadlineIsATimeout(t *testing.T) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
	s := socketDeadlineStore{}
	l, err := core.NewLimiter(s, []core.Policy{p}, core.WithCircuitBreaker(0, time.Millisecond))
	require.NoError(t, err)
	for range 20 {
		d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, errIOTimeout)
		assert.Equal(t, outcome.StoreErrTimeout, outcome.StoreErrorKind(d.Err))
	}
}

// Take decides one request at a time: the fake has no layers.
func (s socketDeadlineStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return takeOne(ctx, now, reqs, out, s.decide)
}
