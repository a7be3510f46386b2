package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/hooks"
	"github.com/apigate/ratelimit/internal/limits"
)

// FailMode says what a Limiter decides when its store fails or times out.
type FailMode int

const (
	// FailOpen allows the request (its Decision has Source SourceFailMode).
	// It is the default, as in Kong and Envoy: an outage of the rate
	// limiter should not become an outage of the API.
	FailOpen FailMode = iota
	// FailClosed denies the request, with RetryAfter and ResetAfter set to
	// the Limiter's fail-closed retry (one second unless WithFailClosedRetry
	// says).
	FailClosed
)

// String returns "open" or "closed".
func (m FailMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailMode(%d)", int(m))
}

// Limiter decides whether requests may pass under one Policy, keeping its
// state in a Store. It is safe for concurrent use; build one per policy and
// share it.
//
// Allow and AllowN decide now; AllowAt and AllowNAt at a time the caller
// gives, as tests do. They return a Decision and an error. Invalid input
// (an empty key, a bad cost) returns the zero Decision and an error
// wrapping one of the sentinel errors. A store failure returns the
// Decision of the fallback store (see WithFallback) or else the FailMode,
// together with an error wrapping ErrStore, so that callers can log it;
// Decision.Source says which decided. A caller whose context ends before
// the store decided gets a Decision that is not Allowed and an error
// wrapping ErrCanceled (see AllowN).
type Limiter struct {
	store     Store
	policy    Policy
	capacity  int64
	failMode  FailMode
	failRetry time.Duration
	fallback  Store // in process
	denied    *denyCache
	brk       breaker
	born      time.Time // when NewLimiter returned it, with a monotonic reading
	bornNs    int64     // born in Unix nanoseconds
	openErr   error     // the error of decisions made while the breaker is open
	observers []Observer
	shadow    bool
	layered   *layered       // nil but for NewLayered
	sources   []PolicySource // WithPolicySource, in order; nil when none
	// direct says that allow may ask the store itself, without decide,
	// when the request is plain: there is no observer, shadow mode, policy source, deny cache, fallback or layer
	// to attend to.
	direct bool
	// inProcess is set once the store has shown itself in process (it
	// reported the time it decided at): its latency is not measured.
	inProcess atomic.Bool
}

func init() {
	hooks.LimiterStore = func(l any) any { return l.(*Limiter).store }
}

// NewLimiter returns a Limiter for policy over store. It fails with
// ErrInvalidPolicy when the policy does not validate and ErrInvalidOption
// when store is nil, or an option is nil or out of range.
func NewLimiter(store Store, policy Policy, opts ...Option) (*Limiter, error) {
	return newLimiter(store, policy, nil, opts)
}

// newLimiter is NewLimiter, of a layered Limiter when ls is not nil: the
// observers are bound to the Limiter once it is whole, layers included.
func newLimiter(store Store, policy Policy, ls func(*Limiter, config) (*layered, error), opts []Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOption)
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if policy.Name == "" {
		policy.Name = policy.defaultName()
	}
	c := defaultConfig()
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	l := &Limiter{
		store:     store,
		policy:    policy,
		capacity:  policy.capacity(),
		failMode:  c.failMode,
		failRetry: c.failRetry,
		fallback:  c.fallback,
		born:      time.Now(),
		shadow:    c.shadow,
		sources:   c.sources,
	}
	l.bornNs = unixNano(l.born)
	if c.denyCacheKeys > 0 {
		l.denied = &denyCache{max: c.denyCacheKeys, m: make(map[string]denial)}
	}
	l.brk.threshold, l.brk.interval = uint64(c.brkFailures), int64(c.probeInterval)
	if l.fallback != nil {
		l.brk.horizon = int64(horizon(policy))
	}
	l.openErr = fmt.Errorf("%w: policy %q: %w", ErrStore, policy.Name, ErrCircuitOpen)
	if ls != nil {
		layered, err := ls(l, c)
		if err != nil {
			return nil, err
		}
		l.layered = layered
	}
	observers, err := bindObservers(l, c.observers)
	if err != nil {
		return nil, err
	}
	l.observers = observers
	l.direct = l.observers == nil && !l.shadow && l.sources == nil &&
		l.denied == nil && l.fallback == nil && l.layered == nil
	return l, nil
}

// Policy returns the Limiter's policy, with its Name filled in.
func (l *Limiter) Policy() Policy { return l.policy }

// Shadow reports whether the Limiter is in shadow mode (WithShadow): it
// never denies, and marks the requests it would have denied with
// Decision.Shadowed.
func (l *Limiter) Shadow() bool { return l.shadow }

// FailMode returns what the Limiter decides when its store fails.
func (l *Limiter) FailMode() FailMode { return l.failMode }

// DenyCacheLen returns how many denials the Limiter's deny cache
// remembers (WithDenyCache), expired ones not yet dropped included; 0
// without a deny cache.
func (l *Limiter) DenyCacheLen() int {
	if l.denied == nil {
		return 0
	}
	l.denied.mu.Lock()
	defer l.denied.mu.Unlock()
	return len(l.denied.m)
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.allow(ctx, key, 1, time.Time{})
}

// AllowN decides whether a request of cost n from the client identified by
// key may pass now, and records it when it may. n weighs expensive requests:
// an endpoint that costs 5 takes 5 units of the quota.
//
// The caller's cancellation is not a store failure. When ctx has ended
// before the store is asked, the store is not asked; the store is called
// with ctx, and returns promptly once it ends (see Store). If the store
// decided, its decision is returned; if it failed and ctx has ended
// meanwhile (the request may have spent quota in the store, but it was
// not admitted), the Decision is not Allowed and the error wraps
// ErrCanceled and ctx's error: no FailMode or fallback applies.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	return l.allow(ctx, key, n, time.Time{})
}

// AllowNTimed is AllowN that also returns the time the store decided at,
// when the Limiter asked the store itself and the store reports it (an
// in-process store, such as the memory store, on a Limiter with no
// observer, shadow mode, policy source, deny cache, fallback or layer);
// otherwise the zero Time, and the caller reads its clock if it needs the
// time.
// The headers of a response, X-RateLimit-Reset an absolute time among
// them, are then written without reading the clock a second time.
func (l *Limiter) AllowNTimed(ctx context.Context, key string, n int64) (Decision, time.Time, error) {
	if l.direct {
		req := Request{Key: key, Policy: l.policy, Cost: n}
		if l.plain(ctx, key, n) {
			d, at, err := l.store.Take(ctx, time.Time{}, req)
			if err != nil {
				d, err = l.storeFailed(ctx, req, time.Time{}, false, err)
				return d, time.Time{}, err
			}
			d.Policy = l.policy
			if d.Source != SourceStore {
				d.Source = SourceStore
			}
			return d, at, nil
		}
	}
	d, err := l.allow(ctx, key, n, time.Time{})
	return d, time.Time{}, err
}

// AllowAt is AllowNAt(ctx, key, 1, now).
func (l *Limiter) AllowAt(ctx context.Context, key string, now time.Time) (Decision, error) {
	return l.allow(ctx, key, 1, now)
}

// AllowNAt is AllowN at the time now: the store decides at now (Take's
// now) instead of reading its own clock, and the deny cache, the
// circuit breaker and the recovery after a store failure count time by now
// too. It makes time explicit, for tests and simulations; a zero now is
// AllowN's time. Mixing both forms on one Limiter is sound only when now
// follows the real time: the Limiter counts AllowN's time on the monotonic
// clock since it was built, an explicit now as it is.
func (l *Limiter) AllowNAt(ctx context.Context, key string, n int64, now time.Time) (Decision, error) {
	return l.allow(ctx, key, n, now)
}

// allow is AllowNAt; a zero at is the store's clock.
func (l *Limiter) allow(ctx context.Context, key string, n int64, at time.Time) (d Decision, err error) {
	if l.direct {
		// The hot path (memstore's): decide, spared its tests for what
		// this Limiter does not have, and two copies of the Decision.
		// req is built before plain's call, so that its stores have
		// landed when it is copied into Take's arguments (a copy right
		// after them waits for them: a store-forwarding stall).
		req := Request{Key: key, Policy: l.policy, Cost: n}
		if l.plain(ctx, key, n) {
			d, _, err = l.store.Take(ctx, at, req)
			if err != nil {
				return l.storeFailed(ctx, req, at, false, err)
			}
			d.Policy = l.policy
			if d.Source != SourceStore {
				d.Source = SourceStore
			}
			return d, nil
		}
	}
	if l.layered != nil {
		return l.allowEvery(ctx, key, n, at)
	}
	if l.observers == nil && !l.shadow {
		return l.decide(ctx, key, n, at, nil)
	}
	if l.observers == nil {
		d, err = l.decide(ctx, key, n, at, nil)
		if !d.Allowed {
			shade(&d, err)
		}
		return d, err
	}
	var w watch
	d, err = l.decide(ctx, key, n, at, &w)
	if l.shadow && !d.Allowed {
		shade(&d, err)
	}
	l.observe(n, &w, &d, err)
	return d, err
}

// shade admits *d, a denial returned with err, in shadow mode, unless no
// one decided it: invalid input and ErrCanceled stay as they are.
func shade(d *Decision, err error) {
	if err != nil && (!errors.Is(err, ErrStore) || errors.Is(err, ErrCanceled)) {
		return
	}
	d.Allowed, d.Shadowed = true, true
}

// decide is allow; w, when not nil, records what observers hear beyond
// the Decision.
func (l *Limiter) decide(ctx context.Context, key string, n int64, at time.Time, w *watch) (Decision, error) {
	if n < 1 {
		return Decision{}, fmt.Errorf("%w: cost %d is not positive", ErrInvalidCost, n)
	}
	policy, capacity := l.policy, l.capacity
	if l.sources != nil {
		p, err := l.adjust(policy)
		if err != nil {
			return l.failed(), err
		}
		policy, capacity = p, p.capacity()
	}
	if n > capacity && n > l.capacity {
		return Decision{}, fmt.Errorf("%w: cost %d, capacity %d of policy %q", ErrCostExceedsLimit, n, capacity, policy.Name)
	}
	key, err := normalizeKey(key)
	if err != nil {
		return Decision{}, err
	}
	if w != nil {
		w.key = key
	}
	if n > capacity {
		// Within the configured policy, but not the one a policy source
		// made of it (limits shrunk under load): a denial, without asking
		// the store (see overLayers).
		return Decision{Limit: capacity, ResetAfter: policy.Window, RetryAfter: policy.Window, Policy: policy, Source: SourceStore}, nil
	}
	if ctx.Err() != nil {
		return l.canceled(ctx, nil)
	}
	req := Request{Key: key, Policy: policy, Cost: n}
	var now time.Time // the deny cache's clock, read before the store decides
	var gen uint64    // the deny cache's generation, likewise
	if l.denied != nil {
		if now = at; now.IsZero() {
			now = time.Now()
		}
		if d, ok := l.denied.get(key, n, now, &policy); ok {
			d.Limit, d.Policy = capacity, policy
			return d, nil
		}
		gen = l.denied.generation()
	}
	state := l.brk.state.Load() // 0 on the hot path: all is well
	probe := false
	if state&brkOpen != 0 {
		if probe = l.brk.tryProbe(l.elapsed(at)); !probe {
			return l.withoutStore(ctx, req, at, l.openErr)
		}
	}
	var d Decision
	var start time.Time
	if w != nil && !l.inProcess.Load() {
		start = time.Now()
	}
	var took time.Time
	if !probe {
		d, took, err = l.store.Take(ctx, at, req) // the hot path, spared a call
	} else {
		d, took, err = l.do(ctx, opTake, req, at, probe)
	}
	if !start.IsZero() {
		if !took.IsZero() {
			// It decided in process: it never waits, and is timed no
			// more.
			l.inProcess.Store(true)
			w.latency = 0
		} else {
			w.latency = time.Since(start)
		}
	}
	if err != nil {
		return l.storeFailed(ctx, req, at, probe, err)
	}
	if state&brkCount != 0 {
		l.brk.succeed()
	}
	d.Policy, d.Source = policy, SourceStore
	if l.fallback != nil && d.Allowed {
		d = l.mirror(ctx, req, at, d)
	}
	if l.denied != nil && !d.Allowed {
		l.denied.put(key, n, now, d, gen)
	}
	return d, nil
}

// plain reports whether a request for key and cost n on a direct Limiter
// may skip decide: its input is valid as it is (no key to digest), ctx has
// not ended and the breaker is closed with no failure counted.
func (l *Limiter) plain(ctx context.Context, key string, n int64) bool {
	return uint64(n-1) < uint64(l.capacity) && key != "" && len(key) <= limits.MaxKeyLen && plainKey(key) &&
		l.brk.state.Load() == 0 && ctx.Err() == nil
}

// storeFailed is the answer to req, which the store failed with err:
// ErrCanceled when the caller has left meanwhile, else the fallback's or
// the FailMode's decision, with an error wrapping ErrStore. The failure
// counts toward opening the breaker unless it was the breaker's probe (the
// probe reports itself) or it reports invalid input.
func (l *Limiter) storeFailed(ctx context.Context, req Request, at time.Time, probe bool, err error) (Decision, error) {
	if callerDone(ctx) {
		return l.canceled(ctx, err)
	}
	if !probe && countsAsFailure(err) {
		l.brk.fail(l.elapsed(at))
	}
	return l.withoutStore(ctx, req, at, fmt.Errorf("%w: policy %q: %w", ErrStore, l.policy.Name, timedOut(err)))
}

// withoutStore decides req by the fallback or else the FailMode, for a
// store that failed with err or was not asked.
func (l *Limiter) withoutStore(ctx context.Context, req Request, at time.Time, err error) (Decision, error) {
	if l.fallback != nil {
		// Before the fallback's Take, so that a concurrent mirror that
		// the fallback refuses sees the degraded period (see mirror).
		l.brk.degrade(l.elapsed(at))
		if d, _, ferr := l.fallback.Take(ctx, at, req); ferr == nil {
			d.Policy, d.Source = req.Policy, SourceFallback
			return d, err
		}
	}
	return l.failed(), err
}

// mirror takes req, which the store admitted with d, in the fallback too.
// While the Limiter is Recovering, the fallback's refusal refuses the
// request; otherwise it is ignored (the fallback's view is already full).
// The state is read after the fallback's Take: a concurrent decision
// without the store marks the degraded period before its own Take, so
// that either this mirror sees it, or that decision sees this mirror.
func (l *Limiter) mirror(ctx context.Context, req Request, at time.Time, d Decision) Decision {
	// The fallback counts what the store admitted; it strikes no one for
	// it (its lockouts are its own, when it decides alone).
	req.Policy.Lockout, req.Policy.LockoutMax, req.Policy.LockoutMemory = 0, 0, 0
	fd, _, err := l.fallback.Take(ctx, at, req)
	if err != nil || l.brk.state.Load()&brkDegraded == 0 || !l.brk.degraded(l.elapsed(at)) {
		return d
	}
	if !fd.Allowed {
		fd.Policy, fd.Source = req.Policy, SourceFallback
		return fd
	}
	d.Remaining = min(d.Remaining, fd.Remaining)
	d.ResetAfter = max(d.ResetAfter, fd.ResetAfter)
	d.Delay = max(d.Delay, fd.Delay)
	return d
}

// countsAsFailure reports whether a store's error counts toward opening
// the circuit breaker: not when it reports invalid input, which says
// nothing of the store's health.
func countsAsFailure(err error) bool {
	return !errors.Is(err, ErrInvalidKey) && !errors.Is(err, ErrInvalidPolicy) &&
		!errors.Is(err, ErrInvalidCost) && !errors.Is(err, ErrCostExceedsLimit)
}

// elapsed is the time at in Unix nanoseconds, for the breaker. A zero at
// is now, as the monotonic clock has counted it since the Limiter was
// built, so that a jump of the wall clock cannot open or close a period.
func (l *Limiter) elapsed(at time.Time) int64 {
	if at.IsZero() {
		return addSat(l.bornNs, int64(time.Since(l.born)))
	}
	return unixNano(at)
}

// unixNano is t in Unix nanoseconds, saturated at the bounds of int64
// (where t.UnixNano is undefined).
func unixNano(t time.Time) int64 { return int64(t.Sub(time.Unix(0, 0))) }

// Reset forgets the state of key, here and in the fallback store if any,
// so its next request finds a whole quota; once it has returned, no denial
// the deny cache remembered from before is served. It forgets the key's
// lockout and strikes too (see Lockout): it is the call that forgives a
// client, after a successful login for instance. It is bounded as the
// store bounds its calls, and treats the caller's
// cancellation as AllowN does: the error then wraps ErrCanceled, and the
// state may or may not have been forgotten. It asks the store even while
// the circuit breaker is open.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if l.layered != nil {
		return l.resetEvery(ctx, key)
	}
	return l.resetPolicy(ctx, key, l.policy)
}

// resetPolicy is Reset of key under policy.
func (l *Limiter) resetPolicy(ctx context.Context, key string, policy Policy) error {
	key, err := normalizeKey(key)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		_, err := l.canceled(ctx, nil)
		return err
	}
	_, _, err = l.do(ctx, opReset, Request{Key: key, Policy: policy}, time.Time{}, false)
	if l.fallback != nil {
		_ = l.fallback.Reset(ctx, key, policy)
	}
	if l.denied != nil {
		l.denied.reset(key)
	}
	if err != nil {
		if callerDone(ctx) {
			_, err := l.canceled(ctx, err)
			return err
		}
		return fmt.Errorf("%w: reset: %w", ErrStore, timedOut(err))
	}
	return nil
}

// storeOp is what a Limiter asks its store.
type storeOp uint8

const (
	opTake  storeOp = iota // Take(req)
	opReset                // Reset(req.Key, req.Policy)
)

// do asks the store op about req, with the caller's ctx: a store that
// may block bounds its own calls (see Store). When probe is set, the call
// is the circuit breaker's probe, ended as soon as the store returns.
func (l *Limiter) do(ctx context.Context, op storeOp, req Request, at time.Time, probe bool) (d Decision, took time.Time, err error) {
	if op == opReset {
		err = l.store.Reset(ctx, req.Key, req.Policy)
	} else {
		d, took, err = l.store.Take(ctx, at, req)
	}
	if probe {
		l.brk.probed(err == nil, l.elapsed(at))
	}
	return d, took, err
}

// callerDone reports whether the caller's ctx has ended: canceled, or its
// deadline passed (checked on the clock too, since the store may give up
// on that deadline a moment before ctx's own timer fires).
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// canceled is the answer to a caller whose ctx has ended: not Allowed,
// and an error wrapping ErrCanceled and ctx's error (storeErr, if any,
// only as text).
func (l *Limiter) canceled(ctx context.Context, storeErr error) (Decision, error) {
	cause := ctx.Err()
	if cause == nil { // the deadline has passed, its timer not yet fired
		cause = context.DeadlineExceeded
	}
	err := fmt.Errorf("%w: policy %q: %w", ErrCanceled, l.policy.Name, cause)
	if storeErr != nil {
		err = fmt.Errorf("%w (store: %v)", err, storeErr)
	}
	return Decision{Limit: l.capacity, Policy: l.policy}, err
}

// timedOut adds ErrTimeout to err, a store failure of a caller whose ctx
// has not ended, when err says the store gave up on a deadline: its own
// timeout (it wraps context.DeadlineExceeded, or os.ErrDeadlineExceeded
// from a socket).
func timedOut(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// failed is the Decision of the FailMode.
func (l *Limiter) failed() Decision {
	if l.failMode == FailClosed {
		return Decision{Limit: l.capacity, ResetAfter: l.failRetry, RetryAfter: l.failRetry, Policy: l.policy, Source: SourceFailMode}
	}
	return Decision{Allowed: true, Limit: l.capacity, Remaining: l.capacity, Policy: l.policy, Source: SourceFailMode}
}

// normalizeKey returns the key a store sees for a client key: the key
// itself when it is at most 128 bytes of printable ASCII without '{'
// or '}', and "sha256:" followed by the hex SHA-256 of the key otherwise. It
// fails with ErrInvalidKey on an empty key.
func normalizeKey(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) <= limits.MaxKeyLen && plainKey(key) {
		return key, nil
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func plainKey(key string) bool {
	for i := 0; i < len(key); i++ {
		if b := key[i]; b < 0x21 || b > 0x7e || b == '{' || b == '}' {
			return false
		}
	}
	return true
}
