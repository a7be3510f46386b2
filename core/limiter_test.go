package core_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// fakeStore is a Store that records what it is asked and answers what it is
// told to. It checks the Limiter's side of the contract; the algorithms are
// checked against real stores by core/storetest.
type fakeStore struct {
	quietless
	mu          sync.Mutex
	reqs        []core.Request
	nows        []time.Time
	hadDeadline []bool
	resets      []string
	answer      core.Decision
	err         error
	release     chan struct{} // when set, Take blocks until it is closed or timeout passes
	timeout     time.Duration // with release: how long Take waits, as a store bounds its calls
}

func (s *fakeStore) decide(ctx context.Context, now time.Time, req core.Request) (core.Decision, time.Time, error) {
	if s.release != nil {
		// A store that may block bounds itself: by its own timeout, or
		// the caller's ctx, whichever ends first.
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		select {
		case <-s.release:
		case <-t.C:
			return core.Decision{}, time.Time{}, fmt.Errorf("fake: %w", context.DeadlineExceeded)
		case <-ctx.Done():
			return core.Decision{}, time.Time{}, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := ctx.Deadline()
	s.reqs = append(s.reqs, req)
	s.nows = append(s.nows, now)
	s.hadDeadline = append(s.hadDeadline, ok)
	return s.answer, time.Time{}, s.err
}

func (s *fakeStore) Reset(_ context.Context, key string, _ core.Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets = append(s.resets, key)
	return s.err
}

// directStore is a fakeStore as a fallback, in process as memstore is.
type directStore struct{ *fakeStore }

var tb10 = core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}

// hashed is the key a store sees for a client key the Limiter hashes.
func hashed(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestNewLimiterRejectsBadInput(t *testing.T) {
	s := &fakeStore{}
	tests := []struct {
		name  string
		store core.Store
		p     core.Policy
		opts  []core.Option
		want  error
	}{
		{"nil store", nil, tb10, nil, core.ErrInvalidOption},
		{"invalid policy", s, core.Policy{Algorithm: core.TokenBucket}, nil, core.ErrInvalidOption},
		{"nil option", s, tb10, []core.Option{nil}, core.ErrInvalidOption},
		{"nil option after a valid one", s, tb10, []core.Option{core.WithShadow(), nil}, core.ErrInvalidOption},
		{"negative fail closed", s, limitertest.Named(tb10, "", -time.Second), nil, core.ErrInvalidOption},
		{"tiny fail closed", s, limitertest.Named(tb10, "", time.Microsecond), nil, core.ErrInvalidOption},
		{"huge fail closed", s, limitertest.Named(tb10, "", 367*24*time.Hour), nil, core.ErrInvalidOption},
		{"nil fallback", s, tb10, []core.Option{core.WithFallback(nil)}, core.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := core.NewLimiter(tt.store, []core.Policy{tt.p}, tt.opts...)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, l)
		})
	}
	// The same options with valid values are accepted.
	_, err := core.NewLimiter(s, []core.Policy{limitertest.Named(tb10, "", time.Millisecond)},
		core.WithFallback(directStore{&fakeStore{}}))

	require.NoError(t, err)
}

func TestAllowNRejectsBadInput(t *testing.T) {
	s := &fakeStore{answer: core.Decision{Allowed: true}}
	l, err := core.NewLimiter(s, []core.Policy{{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}})
	require.NoError(t, err)
	tests := []struct {
		name string
		key  string
		cost int64
		want error
	}{
		{"empty key", "", 1, core.ErrInvalidOption},
		{"zero cost", "k", 0, core.ErrInvalidOption},
		{"negative cost", "k", -3, core.ErrInvalidOption},
		{"cost above burst", "k", 21, core.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := l.AllowN(context.Background(), tt.key, tt.cost, time.Time{})
			require.ErrorIs(t, err, tt.want)
			assert.False(t, d.Allowed, "a rejected request's decision")
			assert.Nil(t, d.Err, "the call's error says it")
		})
	}
	assert.Empty(t, s.reqs, "the store was asked about rejected input")
	// The capacity itself is a valid cost.
	_, err = l.AllowN(context.Background(), "k", 20, time.Time{})
	require.NoError(t, err, "cost == burst")
}

func TestAllowNAtPassesTheRequestAndFillsThePolicy(t *testing.T) {
	s := &fakeStore{answer: core.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	d, err := l.AllowN(context.Background(), "203.0.113.7", 3, t0)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 9, d.Remaining)
	assert.Equal(t, "token_bucket-10-per-1s", d.Policy.Name)
	assert.Equal(t, core.SourceStore, d.Source)

	require.Len(t, s.reqs, 1)
	got := s.reqs[0]
	assert.Equal(t, "203.0.113.7", got.Key)
	assert.EqualValues(t, 3, got.Cost)
	assert.Equal(t, t0, s.nows[0])
	assert.Equal(t, l.Policies()[0], got.Policy)
	assert.False(t, s.hadDeadline[0], "the Limiter gave the store a deadline of its own")
}

// TestAllowLeavesTheTimeToTheStore: Allow, and AllowAt at the zero Time,
// send a zero Now, so that the store reads its own clock.
func TestAllowLeavesTheTimeToTheStore(t *testing.T) {
	s := &fakeStore{answer: core.Decision{Allowed: true}}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	_, err = l.AllowN(ctx, "k", 2, time.Time{})
	require.NoError(t, err)
	_, err = l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	_, err = l.AllowN(ctx, "k", 1, t0)
	require.NoError(t, err)
	require.Len(t, s.reqs, 4)
	for i, now := range s.nows[:3] {
		assert.True(t, now.IsZero(), "request %d: now = %v, want zero", i, now)
	}
	assert.Equal(t, t0, s.nows[3])
	assert.EqualValues(t, []int64{1, 2, 1, 1}, []int64{s.reqs[0].Cost, s.reqs[1].Cost, s.reqs[2].Cost, s.reqs[3].Cost})
}

// TestStoreGetsTheCallersContext: the Limiter calls its store with the
// caller's context as it is: it builds no deadline of its own (a store
// bounds its own calls).
func TestStoreGetsTheCallersContext(t *testing.T) {
	s := &fakeStore{answer: core.Decision{Allowed: true}}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	_, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.NoError(t, l.Reset(context.Background(), "k"))
	require.Len(t, s.hadDeadline, 1)
	assert.False(t, s.hadDeadline[0], "the store had a deadline")
	assert.Equal(t, []string{"k"}, s.resets)
}

func TestStoreFailureFollowsFailMode(t *testing.T) {
	boom := errors.New("connection refused")
	for _, failClosed := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprint("fail closed ", failClosed), func(t *testing.T) {
			s := &fakeStore{err: boom}
			l, err := core.NewLimiter(s, []core.Policy{limitertest.Named(tb10, "", failClosed)})
			require.NoError(t, err)
			d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
			require.NoError(t, err, "a decision was made: the idiomatic err check must not turn fail-open into fail-closed")
			require.ErrorIs(t, d.Err, limits.ErrStore)
			require.ErrorIs(t, d.Err, boom)
			assert.Equal(t, core.SourceFailMode, d.Source)
			assert.Equal(t, limits.DefaultName(tb10.Algorithm, tb10.Limit, tb10.Window, tb10.Burst), d.Policy.Name)
			assert.EqualValues(t, 10, d.Limit)
			switch failClosed {
			case 0:
				assert.True(t, d.Allowed, "fail open")
				assert.Zero(t, d.RetryAfter)
			default:
				assert.False(t, d.Allowed, "fail closed")
				assert.Equal(t, 2*time.Second, d.RetryAfter)
				assert.Equal(t, 2*time.Second, d.ResetAfter)
				assert.Zero(t, d.Remaining)
			}
		})
	}
}

func TestDefaultFailModeIsOpen(t *testing.T) {
	l, err := core.NewLimiter(&fakeStore{err: errDown}, []core.Policy{tb10})
	require.NoError(t, err)
	assert.Zero(t, l.Policies()[0].FailClosed)
	d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a store that fails lets the request through")
	assert.Equal(t, core.SourceFailMode, d.Source)
	assert.ErrorIs(t, d.Err, errDown)
}

// TestFrozenStoreTimesOut uses a frozen store that gives up after its own
// timeout, as a store must: the Limiter reads a timeout from its error.
func TestFrozenStoreTimesOut(t *testing.T) {
	const timeout = 30 * time.Millisecond
	s := &fakeStore{release: make(chan struct{}), timeout: timeout}
	defer close(s.release)
	l, err := core.NewLimiter(s, []core.Policy{limitertest.Named(tb10, "", time.Second)})
	require.NoError(t, err)
	start := time.Now()
	d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
	elapsed := time.Since(start)
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrStore)
	require.ErrorIs(t, d.Err, context.DeadlineExceeded)
	assert.False(t, d.Allowed, "fail closed allowed a request")
	// A correctness bound, not a benchmark: the call must not wait for the
	// store, which never answers while the test runs.
	assert.GreaterOrEqual(t, elapsed, timeout)
	assert.Less(t, elapsed, timeout+testwait.D(2*time.Second))
}

func TestCallerCancellationIsNotATimeout(t *testing.T) {
	s := &fakeStore{release: make(chan struct{}), timeout: time.Hour}
	defer close(s.release)
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err := l.AllowN(ctx, "k", 1, time.Time{})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, limits.ErrStore)
	assert.False(t, d.Allowed, "nothing was decided")
}

// TestKeyNormalization checks the key the store sees for each client key:
// the key itself when it is short printable ASCII without braces, its
// SHA-256 otherwise.
func TestKeyNormalization(t *testing.T) {
	tests := []struct {
		key    string
		hashed bool
	}{
		{"203.0.113.7", false},
		{"ip:2001:db8::/56", false},
		{strings.Repeat("a", limits.MaxKeyLen), false},
		{strings.Repeat("a", limits.MaxKeyLen+1), true},
		{"user{1}", true},
		{"}", true},
		{"has space", true},
		{"tab\there", true},
		{"nul\x00", true},
		{"ünïcode", true},
	}
	s := directStore{&fakeStore{answer: core.Decision{Allowed: true}}}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	seen := map[string]string{}
	for i, tt := range tests {
		_, err := l.AllowN(context.Background(), tt.key, 1, time.Time{})
		require.NoError(t, err, "key %q", tt.key)
		require.Len(t, s.reqs, i+1)
		got := s.reqs[i].Key
		want := tt.key
		if tt.hashed {
			want = hashed(tt.key)
		}
		assert.Equal(t, want, got, "the store's key for %q", tt.key)
		if other, dup := seen[got]; dup {
			t.Errorf("keys %q and %q both normalize to %q", other, tt.key, got)
		}
		seen[got] = tt.key
	}
}

func TestReset(t *testing.T) {
	s := &fakeStore{}
	l, err := core.NewLimiter(s, []core.Policy{tb10})
	require.NoError(t, err)
	require.NoError(t, l.Reset(context.Background(), "k{1}"))
	assert.Equal(t, []string{hashed("k{1}")}, s.resets)
	require.ErrorIs(t, l.Reset(context.Background(), ""), core.ErrInvalidOption)
	s.err = errors.New("down")
	require.ErrorIs(t, l.Reset(context.Background(), "k"), limits.ErrStore)
}

func TestFallbackDecidesWhenTheStoreFails(t *testing.T) {
	boom := errors.New("connection refused")
	local := directStore{&fakeStore{answer: core.Decision{Limit: 10, Remaining: 0, RetryAfter: 300 * time.Millisecond}}}
	l, err := core.NewLimiter(&fakeStore{err: boom}, []core.Policy{tb10}, core.WithFallback(local))
	require.NoError(t, err)
	d, err := l.AllowN(context.Background(), "k{1}", 2, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrStore)
	require.ErrorIs(t, d.Err, boom)
	assert.False(t, d.Allowed, "the fallback's denial")
	assert.Equal(t, core.SourceFallback, d.Source)
	assert.Equal(t, 300*time.Millisecond, d.RetryAfter)
	assert.Equal(t, limits.DefaultName(tb10.Algorithm, tb10.Limit, tb10.Window, tb10.Burst), d.Policy.Name)
	require.Len(t, local.reqs, 1)
	assert.Equal(t, hashed("k{1}"), local.reqs[0].Key)
	assert.EqualValues(t, 2, local.reqs[0].Cost)

	// A failing fallback leaves the FailMode to decide.
	local.err = errors.New("fallback broken too")
	d, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, boom)
	assert.True(t, d.Allowed, "fail open")
	assert.Equal(t, core.SourceFailMode, d.Source)
}

func TestSourceString(t *testing.T) {
	for s, want := range map[core.Source]string{
		core.SourceStore:     "store",
		core.SourceFallback:  "fallback",
		core.SourceDenyCache: "deny-cache",
		core.SourceFailMode:  "fail-mode",
		core.Source(9):       "Source(9)",
	} {
		assert.Equal(t, want, s.String())
	}
	assert.Equal(t, core.SourceStore, core.Decision{}.Source, "the zero Decision's Source")
}

func TestAlgorithmsReturnsAFreshSlice(t *testing.T) {
	want := []core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.TokenBucket, core.LeakyBucket}
	a := limits.Algorithms[core.Algorithm]()
	require.Equal(t, want, a)
	for _, alg := range a {
		assert.True(t, limits.Known(alg), "%s", alg)
	}
	a[0] = "gcra"
	assert.Equal(t, want, limits.Algorithms[core.Algorithm](), "a caller's change reached the next call")
}

// TestDirectPathDecidesAsDecide: a Limiter over a CallDirect store with
// nothing configured asks the store on a path of its own, which must
// answer every request as the general path does (taken here because an
// observer is configured): the request the store sees, the Decision, the
// error, and the circuit breaker's count of failures.
func TestDirectPathDecidesAsDecide(t *testing.T) {
	long := strings.Repeat("k", limits.MaxKeyLen+1)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name   string
		ctx    context.Context
		key    string
		cost   int64
		answer core.Decision
		err    error
	}{
		{name: "allowed", key: "203.0.113.7", cost: 1, answer: core.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}},
		{name: "denied", key: "203.0.113.7", cost: 3, answer: core.Decision{Limit: 10, RetryAfter: time.Second, ResetAfter: time.Second}},
		{name: "a store's source is overwritten", key: "k", cost: 1, answer: core.Decision{Allowed: true, Source: core.SourceFallback}},
		{name: "hashed key", key: long, cost: 1, answer: core.Decision{Allowed: true}},
		{name: "key with a brace", key: "a{b}", cost: 1, answer: core.Decision{Allowed: true}},
		{name: "empty key", key: "", cost: 1},
		{name: "zero cost", key: "k", cost: 0},
		{name: "cost over capacity", key: "k", cost: 11},
		{name: "full capacity", key: "k", cost: 10, answer: core.Decision{Allowed: true}},
		{name: "canceled", ctx: canceled, key: "k", cost: 1},
		{name: "store failure", key: "k", cost: 1, err: errDown},
		{name: "store refuses the input", key: "k", cost: 1, err: core.ErrInvalidOption},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			type result struct {
				d    core.Decision
				err  string
				reqs []core.Request
				h    core.Health
			}
			decide := func(opts ...core.Option) result {
				s := &fakeStore{answer: tt.answer, err: tt.err}
				l, err := core.NewLimiter(directStore{s}, []core.Policy{tb10}, append(opts, core.WithCircuitBreaker(1, time.Hour))...)
				require.NoError(t, err)
				d, err := l.AllowN(ctx, tt.key, tt.cost, t0)
				r := result{d: d, reqs: s.reqs, h: l.HealthAt(t0)}
				if err != nil {
					r.err = err.Error()
				}
				return r
			}
			direct := decide()
			general := decide(core.WithObserver(limitertest.Observer(func(core.Event) {})))
			assert.Equal(t, general, direct)
		})
	}
}

// Take decides one request at a time: the fake has no layers.
func (s *fakeStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return takeOne(ctx, now, reqs, out, s.decide)
}
