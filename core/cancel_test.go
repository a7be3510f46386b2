package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// waitBound bounds every wait of these tests for something that must
// happen; it is never slept.
var waitBound = testwait.D(10 * time.Second)

// answer is what a gateStore's Take returns.
type answer struct {
	d   core.Decision
	err error
}

// gateStore is a Store whose Take hands its context to the test and then
// waits for the test's answer or for its context to end, whichever comes
// first, returning the context's error in the latter case: a store that
// fails on cancellation, as go-redis does.
type gateStore struct {
	quietless
	entered   chan context.Context
	answers   chan answer
	calls     atomic.Int32
	ignoreCtx bool // wait for the answer alone, as a default go-redis client reading a frozen server
}

func newGateStore() *gateStore {
	return &gateStore{entered: make(chan context.Context, 1), answers: make(chan answer, 1)}
}

func (s *gateStore) decide(ctx context.Context, now time.Time, _ core.Request) (core.Decision, time.Time, error) {
	s.calls.Add(1)
	s.entered <- ctx
	if s.ignoreCtx {
		a := <-s.answers
		return a.d, time.Time{}, a.err
	}
	select {
	case a := <-s.answers:
		return a.d, time.Time{}, a.err
	case <-ctx.Done():
		return core.Decision{}, time.Time{}, ctx.Err()
	}
}

func (s *gateStore) Reset(context.Context, string, core.Policy) error { return nil }

// storeCtx returns the context of the Take in progress.
func (s *gateStore) storeCtx(t *testing.T) context.Context {
	t.Helper()
	select {
	case ctx := <-s.entered:
		return ctx
	case <-time.After(waitBound):
		t.Fatal("the store was never called")
		return nil
	}
}

// The one way a Limiter calls its store: on the caller's goroutine, with
// the caller's context.
var callModes = []struct {
	name string
	wrap func(*gateStore) core.Store
}{
	{"direct", func(s *gateStore) core.Store { return s }},
}

// failConfigs are the ways a Limiter decides when its store fails; the
// fallback admits everything, so that any use of it on a cancellation
// shows.
var failConfigs = []struct {
	name       string
	fallback   bool
	failClosed time.Duration // the policy's FailClosed: 0 fails open
}{
	{"fail-open", false, 0},
	{"fail-closed", false, time.Second},
	{"fallback", true, 0},
}

// cancelCase is one Limiter of the matrix, over a fresh gateStore.
type cancelCase struct {
	gate     *gateStore
	fallback *fakeStore
	l        *core.Limiter
	mode     string
	// fresh returns a case of the same configuration over a fresh
	// gateStore, for a test that must try again.
	fresh func() cancelCase
}

func forEachCancelCase(t *testing.T, test func(t *testing.T, c cancelCase)) {
	for _, cm := range callModes {
		for _, fc := range failConfigs {
			t.Run(cm.name+"/"+fc.name, func(t *testing.T) {
				var fresh func() cancelCase
				fresh = func() cancelCase {
					c := cancelCase{gate: newGateStore(), fallback: &fakeStore{answer: core.Decision{Allowed: true, Limit: 10, Remaining: 9}}, mode: cm.name, fresh: fresh}
					var opts []core.Option
					if fc.fallback {
						opts = append(opts, core.WithFallback(directStore{c.fallback}))
					}
					var err error
					c.l, err = core.NewLimiter(cm.wrap(c.gate), []core.Policy{limitertest.Named(tb10, "", fc.failClosed)}, opts...)
					require.NoError(t, err)
					return c
				}
				test(t, fresh())
			})
		}
	}
}

// requireCanceled checks the answer to a caller that has gone: not
// Allowed, the context's error and cause, no store failure, no fail
// mode, no fallback.
func requireCanceled(t *testing.T, c cancelCase, d core.Decision, err error, cause error) {
	t.Helper()
	require.ErrorIs(t, err, cause)
	assert.NotErrorIs(t, err, limits.ErrStore, "a cancellation is not a store failure")
	assert.False(t, d.Allowed, "a canceled request was admitted: %+v", d)
	assert.Equal(t, core.SourceStore, d.Source, "no fail mode nor fallback decides a cancellation")
	assert.EqualValues(t, 10, d.Limit)
	assert.Equal(t, "token_bucket-10-per-1s", d.Policy.Name)
	assert.Empty(t, c.fallback.reqs, "the fallback was asked about a canceled request")
}

// allowAsync runs Allow on a goroutine of its own.
func allowAsync(ctx context.Context, l *core.Limiter) <-chan answer {
	return allowAsyncAt(ctx, l, time.Time{})
}

// allowAsyncAt runs AllowAt at now on a goroutine of its own.
func allowAsyncAt(ctx context.Context, l *core.Limiter, now time.Time) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		d, err := l.AllowN(ctx, "k", 1, now)
		ch <- answer{d, err}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(waitBound):
		t.Fatal("Allow did not return")
		return answer{}
	}
}

func TestCanceledBeforeTheStoreIsNeverAllowed(t *testing.T) {
	forEachCancelCase(t, func(t *testing.T, c cancelCase) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		d, err := c.l.AllowN(ctx, "k", 1, time.Time{})
		requireCanceled(t, c, d, err, context.Canceled)
		assert.Zero(t, c.gate.calls.Load(), "the store was asked for a caller that had gone")

		require.ErrorIs(t, c.l.Reset(ctx, "k"), context.Canceled)
	})
}

// TestCanceledDuringAFailingCallIsNeverAllowed: the client disconnects
// while the store works, and the store then fails (a reset connection, a
// frozen server): the request is not admitted, whatever the fail mode.
func TestCanceledDuringAFailingCallIsNeverAllowed(t *testing.T) {
	forEachCancelCase(t, func(t *testing.T, c cancelCase) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := allowAsync(ctx, c.l)
		c.gate.storeCtx(t)
		cancel()
		// Called with the caller's context, the store sees the
		// cancellation and fails with it.
		a := wait(t, res)
		requireCanceled(t, c, a.d, a.err, context.Canceled)
	})
}

// TestStoreDecisionOutlivesTheCaller: when the store decides, its decision
// stands even if the caller has gone meanwhile (the middleware then checks
// the request before running the handler).
func TestStoreDecisionOutlivesTheCaller(t *testing.T) {
	gate := newGateStore()
	gate.ignoreCtx = true // it decides, whatever the caller does meanwhile
	l, err := core.NewLimiter(gate, []core.Policy{limitertest.Named(tb10, "", time.Second)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	res := allowAsync(ctx, l)
	gate.storeCtx(t)
	cancel()
	gate.answers <- answer{d: core.Decision{Allowed: true, Limit: 10, Remaining: 4}}
	a := wait(t, res)
	require.NoError(t, a.err)
	assert.True(t, a.d.Allowed)
	assert.EqualValues(t, 4, a.d.Remaining)
	assert.Equal(t, core.SourceStore, a.d.Source)
}

// TestCallerDeadlineIsNotAStoreFailure: the caller's own deadline, shorter
// than the Limiter's timeout, passes while the store hangs: ErrCanceled
// with context.DeadlineExceeded, never ErrTimeout nor a fail-open
// admission.
//
// The deadline must pass while the store hangs. On a busy machine it may
// pass before the Limiter has asked the store, which is then never asked
// (TestCanceledBeforeTheStoreIsNeverAllowed): the answer is checked all
// the same, and the test tries again, on a fresh store, with twice the
// deadline.
func TestCallerDeadlineIsNotAStoreFailure(t *testing.T) {
	forEachCancelCase(t, func(t *testing.T, c cancelCase) {
		for deadline := 20 * time.Millisecond; ; deadline *= 2 {
			require.Less(t, deadline, waitBound, "the caller's deadline always passed before the store was asked")
			if callerDeadlinePassedInStore(t, c, deadline) {
				return
			}
			c = c.fresh()
		}
	})
}

// callerDeadlinePassedInStore runs one decision of c's Limiter for a
// caller whose deadline is deadline away and checks its answer; it reports
// whether the store was asked before the Limiter answered.
func callerDeadlinePassedInStore(t *testing.T, c cancelCase, deadline time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	res := allowAsync(ctx, c.l)
	var sctx context.Context
	select {
	case sctx = <-c.gate.entered:
	case a := <-res:
		requireCanceled(t, c, a.d, a.err, context.DeadlineExceeded)
		assert.NotErrorIs(t, a.err, limits.ErrStore)
		t.Logf("a deadline of %v passed before the Limiter asked the store", deadline)
		return false
	case <-time.After(waitBound):
		t.Fatal("Allow neither called the store nor returned")
	}
	want, _ := ctx.Deadline()
	got, ok := sctx.Deadline()
	require.True(t, ok, "the store got no deadline")
	assert.False(t, got.After(want), "the store's deadline %v is after the caller's %v", got, want)
	a := wait(t, res)
	requireCanceled(t, c, a.d, a.err, context.DeadlineExceeded)
	assert.NotErrorIs(t, a.err, limits.ErrStore)
	return true
}

// TestStoreContextKeepsValues: the store's context carries the caller's
// values (trace ids, loggers), whatever the call mode.
func TestStoreContextKeepsValues(t *testing.T) {
	type ctxKey struct{}
	for _, cm := range callModes {
		t.Run(cm.name, func(t *testing.T) {
			gate := newGateStore()
			l, err := core.NewLimiter(cm.wrap(gate), []core.Policy{tb10})
			require.NoError(t, err)
			ctx := context.WithValue(context.Background(), ctxKey{}, "trace-1")
			res := allowAsync(ctx, l)
			assert.Equal(t, "trace-1", gate.storeCtx(t).Value(ctxKey{}))
			gate.answers <- answer{d: core.Decision{Allowed: true}}
			require.NoError(t, wait(t, res).err)
		})
	}
}

// Take decides one request at a time: the fake has no layers.
func (s *gateStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return takeOne(ctx, now, reqs, out, s.decide)
}
