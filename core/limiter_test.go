package core_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
)

// fakeStore is a Store that records what it is asked and answers what it is
// told to. It checks the Limiter's side of the contract; the algorithms are
// checked against real stores by core/storetest.
type fakeStore struct {
	mu          sync.Mutex
	reqs        []core.Request
	hadDeadline []bool
	resets      []string
	answer      core.Decision
	err         error
	release     chan struct{} // when set, Take blocks until it is closed, ignoring ctx
}

func (s *fakeStore) Take(ctx context.Context, req core.Request) (core.Decision, error) {
	if s.release != nil {
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := ctx.Deadline()
	s.reqs = append(s.reqs, req)
	s.hadDeadline = append(s.hadDeadline, ok)
	return s.answer, s.err
}

func (s *fakeStore) Reset(_ context.Context, key string, _ core.Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets = append(s.resets, key)
	return s.err
}

type nonBlockingStore struct{ *fakeStore }

func (nonBlockingStore) NonBlocking() {}

var tb10 = core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}

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
		{"invalid policy", s, core.Policy{Algorithm: core.TokenBucket}, nil, core.ErrInvalidPolicy},
		{"zero timeout", s, tb10, []core.Option{core.WithTimeout(0)}, core.ErrInvalidOption},
		{"negative timeout", s, tb10, []core.Option{core.WithTimeout(-time.Second)}, core.ErrInvalidOption},
		{"unknown fail mode", s, tb10, []core.Option{core.WithFailMode(core.FailMode(7))}, core.ErrInvalidOption},
		{"tiny fail retry", s, tb10, []core.Option{core.WithFailClosedRetry(time.Microsecond)}, core.ErrInvalidOption},
		{"nil clock", s, tb10, []core.Option{core.WithClock(nil)}, core.ErrInvalidOption},
		{"nil fallback", s, tb10, []core.Option{core.WithFallback(nil)}, core.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := core.NewLimiter(tt.store, tt.p, tt.opts...)
			if !errors.Is(err, tt.want) || l != nil {
				t.Fatalf("NewLimiter() = %v, %v; want nil, %v", l, err, tt.want)
			}
		})
	}
}

func TestAllowNRejectsBadInput(t *testing.T) {
	s := &fakeStore{answer: core.Decision{Allowed: true}}
	l, err := core.NewLimiter(s, core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		key  string
		cost int64
		want error
	}{
		{"empty key", "", 1, core.ErrInvalidKey},
		{"zero cost", "k", 0, core.ErrInvalidCost},
		{"negative cost", "k", -3, core.ErrInvalidCost},
		{"cost above burst", "k", 21, core.ErrCostExceedsLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := l.AllowN(context.Background(), tt.key, tt.cost)
			if !errors.Is(err, tt.want) {
				t.Fatalf("AllowN(%q, %d) error = %v, want %v", tt.key, tt.cost, err, tt.want)
			}
			if d.Allowed {
				t.Fatalf("AllowN(%q, %d) allowed a rejected request", tt.key, tt.cost)
			}
		})
	}
	if len(s.reqs) != 0 {
		t.Fatalf("the store was asked %d times about rejected input", len(s.reqs))
	}
	// The capacity itself is a valid cost.
	if _, err := l.AllowN(context.Background(), "k", 20); err != nil {
		t.Fatalf("AllowN(cost == burst) = %v", err)
	}
}

func TestAllowPassesRequestAndFillsPolicy(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &fakeStore{answer: core.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	l, err := core.NewLimiter(s, tb10, core.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(context.Background(), "203.0.113.7", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Remaining != 9 || d.Policy.Name != "token_bucket-10-per-1s" || d.FailedOpen {
		t.Fatalf("decision = %+v", d)
	}
	got := s.reqs[0]
	if got.Key != "203.0.113.7" || got.Cost != 3 || !got.Now.Equal(t0) || got.Policy != l.Policy() {
		t.Fatalf("store got %+v", got)
	}
	if !s.hadDeadline[0] {
		t.Fatal("a blocking store was called without the Limiter's deadline")
	}
}

func TestNonBlockingStoreIsCalledDirectly(t *testing.T) {
	s := nonBlockingStore{&fakeStore{answer: core.Decision{Allowed: true}}}
	l, err := core.NewLimiter(s, tb10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if s.hadDeadline[0] {
		t.Fatal("a NonBlocking store got a deadline: the Limiter bounded a call it needn't")
	}
	if !s.reqs[0].Now.IsZero() {
		t.Fatal("without WithClock the store must read its own clock (Now zero)")
	}
}

func TestStoreFailureFollowsFailMode(t *testing.T) {
	boom := errors.New("connection refused")
	for _, mode := range []core.FailMode{core.FailOpen, core.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			s := &fakeStore{err: boom}
			l, err := core.NewLimiter(s, tb10, core.WithFailMode(mode), core.WithFailClosedRetry(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(context.Background(), "k")
			if !errors.Is(err, core.ErrStore) || !errors.Is(err, boom) {
				t.Fatalf("error = %v, want ErrStore wrapping the store's error", err)
			}
			switch mode {
			case core.FailOpen:
				if !d.Allowed || !d.FailedOpen || d.RetryAfter != 0 {
					t.Fatalf("fail open decision = %+v", d)
				}
			case core.FailClosed:
				if d.Allowed || d.FailedOpen || d.RetryAfter != 2*time.Second || d.ResetAfter != 2*time.Second || d.Remaining != 0 {
					t.Fatalf("fail closed decision = %+v", d)
				}
			}
			if d.Policy.Name == "" || d.Limit != 10 {
				t.Fatalf("decision lacks policy or limit: %+v", d)
			}
		})
	}
}

func TestDefaultFailModeIsOpen(t *testing.T) {
	l, err := core.NewLimiter(&fakeStore{}, tb10)
	if err != nil {
		t.Fatal(err)
	}
	if l.FailMode() != core.FailOpen {
		t.Fatalf("default FailMode = %v, want open", l.FailMode())
	}
}

// TestFrozenStoreIsBounded uses a store that ignores its context, as a
// go-redis client with default options does on a frozen server.
func TestFrozenStoreIsBounded(t *testing.T) {
	s := &fakeStore{release: make(chan struct{})}
	defer close(s.release)
	const timeout = 30 * time.Millisecond
	l, err := core.NewLimiter(s, tb10, core.WithTimeout(timeout), core.WithFailMode(core.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d, err := l.Allow(context.Background(), "k")
	elapsed := time.Since(start)
	if !errors.Is(err, core.ErrTimeout) || !errors.Is(err, core.ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want ErrTimeout and ErrStore", err)
	}
	if d.Allowed {
		t.Fatal("fail closed allowed a request")
	}
	// A correctness bound, not a benchmark: the call must not wait for the
	// store, which never answers while the test runs.
	if elapsed < timeout || elapsed > timeout+2*time.Second {
		t.Fatalf("Allow returned after %v, want about %v", elapsed, timeout)
	}
}

func TestCallerCancellationIsNotATimeout(t *testing.T) {
	s := &fakeStore{release: make(chan struct{})}
	defer close(s.release)
	l, err := core.NewLimiter(s, tb10, core.WithTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = l.Allow(ctx, "k")
	if !errors.Is(err, context.Canceled) || errors.Is(err, core.ErrTimeout) {
		t.Fatalf("error = %v, want context.Canceled and no ErrTimeout", err)
	}
}

func TestKeyNormalization(t *testing.T) {
	long := strings.Repeat("a", core.MaxKeyLen+1)
	tests := []struct {
		key    string
		hashed bool
	}{
		{"203.0.113.7", false},
		{"ip:2001:db8::/56", false},
		{strings.Repeat("a", core.MaxKeyLen), false},
		{long, true},
		{"user{1}", true},
		{"}", true},
		{"has space", true},
		{"tab\there", true},
		{"nul\x00", true},
		{"ünïcode", true},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got, err := core.NormalizeKey(tt.key)
		if err != nil {
			t.Fatalf("NormalizeKey(%q) = %v", tt.key, err)
		}
		if hashed := got != tt.key; hashed != tt.hashed {
			t.Errorf("NormalizeKey(%q) = %q, hashed %v, want %v", tt.key, got, hashed, tt.hashed)
		}
		if tt.hashed && (!strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+64) {
			t.Errorf("NormalizeKey(%q) = %q, want sha256:<64 hex>", tt.key, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("keys %q and %q both normalize to %q", other, tt.key, got)
		}
		seen[got] = tt.key
	}
	if _, err := core.NormalizeKey(""); !errors.Is(err, core.ErrInvalidKey) {
		t.Fatalf("NormalizeKey(\"\") = %v, want ErrInvalidKey", err)
	}
}

func TestReset(t *testing.T) {
	s := &fakeStore{}
	l, err := core.NewLimiter(s, tb10)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(context.Background(), "k{1}"); err != nil {
		t.Fatal(err)
	}
	want, _ := core.NormalizeKey("k{1}")
	if len(s.resets) != 1 || s.resets[0] != want {
		t.Fatalf("store resets = %q, want [%q]", s.resets, want)
	}
	if err := l.Reset(context.Background(), ""); !errors.Is(err, core.ErrInvalidKey) {
		t.Fatalf("Reset(\"\") = %v", err)
	}
	s.err = errors.New("down")
	if err := l.Reset(context.Background(), "k"); !errors.Is(err, core.ErrStore) {
		t.Fatalf("Reset on a failing store = %v, want ErrStore", err)
	}
}

// deadlineStore honours its context's deadline: it answers only when the
// context ends, as a go-redis client with ContextTimeoutEnabled does on a
// frozen server.
type deadlineStore struct {
	fakeStore
	honors bool
}

func (s *deadlineStore) Take(ctx context.Context, req core.Request) (core.Decision, error) {
	if _, ok := ctx.Deadline(); !ok {
		return core.Decision{}, errors.New("called without a deadline")
	}
	<-ctx.Done()
	return core.Decision{}, ctx.Err()
}

func (s *deadlineStore) HonorsDeadline() bool { return s.honors }

func TestDeadlineAwareStoreGetsTheTimeoutAsDeadline(t *testing.T) {
	for _, honors := range []bool{true, false} {
		s := &deadlineStore{honors: honors}
		l, err := core.NewLimiter(s, tb10, core.WithTimeout(20*time.Millisecond), core.WithFailMode(core.FailClosed))
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Allow(context.Background(), "k")
		if !errors.Is(err, core.ErrTimeout) || !errors.Is(err, core.ErrStore) || d.Allowed {
			t.Fatalf("honors %v: %+v, %v; want a fail-closed denial and ErrTimeout", honors, d, err)
		}
	}
}

func TestFallbackDecidesWhenTheStoreFails(t *testing.T) {
	boom := errors.New("connection refused")
	local := nonBlockingStore{&fakeStore{answer: core.Decision{Limit: 10, Remaining: 0, RetryAfter: 300 * time.Millisecond}}}
	l, err := core.NewLimiter(&fakeStore{err: boom}, tb10, core.WithFallback(local), core.WithFailMode(core.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.AllowN(context.Background(), "k{1}", 2)
	if !errors.Is(err, core.ErrStore) || !errors.Is(err, boom) {
		t.Fatalf("error = %v, want the store's error, wrapped in ErrStore", err)
	}
	if d.Allowed || !d.Fallback || d.FailedOpen || d.RetryAfter != 300*time.Millisecond || d.Policy.Name == "" {
		t.Fatalf("decision = %+v, want the fallback's denial", d)
	}
	want, _ := core.NormalizeKey("k{1}")
	if got := local.reqs[0]; got.Key != want || got.Cost != 2 {
		t.Fatalf("fallback got %+v", got)
	}

	// A failing fallback leaves the FailMode to decide.
	local.err = errors.New("fallback broken too")
	d, err = l.Allow(context.Background(), "k")
	if !errors.Is(err, boom) || !d.Allowed || !d.FailedOpen || d.Fallback {
		t.Fatalf("with both stores failing: %+v, %v; want fail open", d, err)
	}
}
