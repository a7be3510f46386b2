package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Limiter decides whether requests may pass under one or more policies,
// its layers, keeping its state in a Store. It is safe for concurrent use;
// build one and share it. AllowN puts a client's request under every layer;
// AllowLayers gives each layer its own key. Either way a request passes
// only when every layer that applies admits it, and one denied by any
// layer takes nothing from any.
//
// A decision's error is nil whenever something was decided, in an outage
// too: a store that fails or times out leaves the decision to the
// fallback store (WithFallback) or else the policy's FailClosed, with
// Decision.Err saying what failed and Decision.Source who decided. A
// non-nil error means that nothing was decided and the request must not
// proceed: bad input (wrapping ErrInvalidOption) or the caller's context
// ending first (wrapping ctx.Err()).
type Limiter struct {
	store    Store
	policy   Policy // the first layer's
	capacity int64  // policy.capacity()
	policies []Policy
	caps     []int64 // each layer's capacity()
	index    map[string]int
	fallback Store // in process
	denied   *denyCache
	brk      breaker
	born     time.Time // when NewLimiter returned it, with a monotonic reading
	bornNs   int64     // born in Unix nanoseconds
	// openErr is the Err of decisions made while the breaker is open.
	openErr error
	// parts holds a circuit breaker per partition of a Partitioned store
	// (nil for any other): brk then keeps only the degraded period after
	// a failure (see WithFallback), which is the Limiter's.
	parts     *partitions
	observers []func(Event)
	shadow    bool
	sources   []PolicySource // WithPolicySource, in order; nil when none
	// inProcess is set once the store has shown itself in process (it
	// reported the time it decided at): its latency is not measured.
	inProcess atomic.Bool
	// leased holds the leases of each layer with a Policy.Lease (nil for
	// the others, and when none has), leasedBits those layers.
	leased     []*leaseTable
	leasedBits uint32
}

// NewLimiter returns a Limiter over store of policies, its layers: 1 to 16
// policies, one being a plain limit. A policy's Name names its layer, in
// storage, in the headers and in metrics; NewLimiter derives one when it
// is empty (see Policy.Name), after making an empty Algorithm
// SlidingWindowCounter. Usage is kept per Name, so that a client
// moved from one policy to another within a layer (a plan, an override)
// keeps it.
//
// It fails with an error wrapping ErrInvalidOption when store is nil, there
// is no policy or more than 16, a policy does not validate, two layers have
// the same Name (names that differ only in case are the same: a client
// reading the headers, an operator writing an override, would take one for
// the other), or an option is nil or out of range (WithDenyCache is for
// Limiters of one policy).
func NewLimiter(store Store, policies []Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOption)
	}
	if len(policies) == 0 {
		return nil, fmt.Errorf("%w: NewLimiter: no policy", ErrInvalidOption)
	}
	own, caps, index, err := layersOf(policies)
	if err != nil {
		return nil, err
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
	if c.denyCacheKeys > 0 && len(own) > 1 {
		return nil, fmt.Errorf("%w: WithDenyCache applies to Limiters of one policy only", ErrInvalidOption)
	}
	l := &Limiter{
		store:    store,
		policy:   own[0],
		capacity: caps[0],
		policies: own,
		caps:     caps,
		index:    index,
		fallback: c.fallback,
		born:     time.Now(),
		shadow:   c.shadow,
		sources:  c.sources,
	}
	l.bornNs = unixNano(l.born)
	l.leased, l.leasedBits = leaseTables(own)
	if c.denyCacheKeys > 0 {
		l.denied = &denyCache{max: c.denyCacheKeys, m: make(map[string]denial)}
	}
	l.brk.threshold, l.brk.interval = uint64(c.brkFailures), int64(c.probeInterval)
	if l.fallback != nil {
		for _, p := range own {
			l.brk.horizon = max(l.brk.horizon, int64(horizon(p)))
		}
	}
	if ps, ok := store.(Partitioned); ok {
		if name := ps.Partitioner(); name != nil {
			l.parts = newPartitions(name, &l.brk, l.elapsed)
		}
	}
	l.openErr = fmt.Errorf("%w: %w", limits.ErrStore, limits.ErrCircuitOpen)
	observers, err := bindObservers(l, c.observers)
	if err != nil {
		return nil, err
	}
	l.observers = observers
	return l, nil
}

// layersOf returns the layers of policies: each policy, validated, its
// Algorithm (SlidingWindowCounter when empty) and Name filled in, its
// capacity, and its index by name.
func layersOf(policies []Policy) ([]Policy, []int64, map[string]int, error) {
	if len(policies) > limits.MaxLayers {
		return nil, nil, nil, fmt.Errorf("%w: NewLimiter: %d policies, more than %d", ErrInvalidOption, len(policies), limits.MaxLayers)
	}
	own := make([]Policy, len(policies))
	caps := make([]int64, len(policies))
	index := make(map[string]int, len(policies))
	for i, p := range policies {
		if err := p.Validate(); err != nil {
			if len(policies) == 1 {
				return nil, nil, nil, err
			}
			return nil, nil, nil, fmt.Errorf("layer %d (%q): %w", i, p.Name, err)
		}
		if p.Algorithm == "" {
			p.Algorithm = SlidingWindowCounter
		}
		if p.Name == "" {
			p.Name = p.defaultName()
		}
		for other := range index {
			if strings.EqualFold(other, p.Name) {
				return nil, nil, nil, fmt.Errorf("%w: NewLimiter: two layers are named %q and %q: give each its own Name", ErrInvalidOption, other, p.Name)
			}
		}
		index[p.Name] = i
		own[i], caps[i] = p, p.capacity()
	}
	return own, caps, index, nil
}

// Policies returns the Limiter's policies, its layers, in order, with
// Algorithms and Names filled in (a copy).
func (l *Limiter) Policies() []Policy { return append([]Policy(nil), l.policies...) }

// Shadow reports whether the Limiter is in shadow mode (WithShadow).
func (l *Limiter) Shadow() bool { return l.shadow }

// AllowN decides whether a request of cost n from the client identified by
// key may pass, under every layer, and records it when it may: an endpoint
// that costs 5 takes 5 units. A key over 128 bytes, or with bytes outside
// printable ASCII, is stored as its SHA-256 digest.
//
// The zero now is the store's clock (time.Now in process, Redis TIME on
// Redis, so that app servers with skewed clocks agree); an explicit now
// makes time data, for tests and simulations, the deny cache and circuit
// breaker counting by it too. Mix both on one Limiter only when now
// follows the real time.
//
// When ctx has ended before the store is asked, it is not asked; a store
// returns promptly once ctx ends (see Store). A store's decision stands;
// if the store failed and ctx has ended meanwhile, the error wraps ctx's,
// and no fallback or FailClosed applies (the request may have spent
// quota, but was not admitted).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64, now time.Time) (d Decision, err error) {
	c := callPool.Get().(*call)
	k := len(l.policies)
	for i := range k {
		r := &c.reqs[i]
		r.Key, r.Cost = key, n
		c.layers[i] = uint8(i)
	}
	c.n = k
	err = l.decide(ctx, now, c, nil)
	c.v.copyTo(&d)
	c.release()
	return d, err
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

// Reset forgets the state of key under the layers named (every layer when
// none is), here and in the fallback store if any, so its next request
// finds a whole quota; once it has returned, no denial the deny cache
// remembered from before is served. It forgets the key's lockout and
// strikes too (see Policy.Lockout): it is the call that forgives a client,
// after a successful login for instance. It is bounded as the store bounds
// its calls, and asks the store even while the circuit breaker is open.
// It fails with ErrInvalidOption for an empty key or a name that is no
// layer's, with an error wrapping ctx's when the caller left first (the
// state may or may not have been forgotten), and with the store's error,
// for each layer the store could not reset.
func (l *Limiter) Reset(ctx context.Context, key string, layers ...string) error {
	if len(layers) == 0 && len(l.policies) == 1 {
		return l.resetPolicy(ctx, key, &l.policies[0])
	}
	for _, name := range layers {
		if _, ok := l.index[name]; !ok {
			return fmt.Errorf("%w: Reset: no layer %q", ErrInvalidOption, name)
		}
	}
	var errs []error
	for i := range l.policies {
		p := &l.policies[i]
		if len(layers) > 0 && !slices.Contains(layers, p.Name) {
			continue
		}
		if err := l.resetPolicy(ctx, key, p); err != nil {
			if errors.Is(err, ErrInvalidOption) || callerDone(ctx) {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// resetPolicy is Reset of key under policy.
func (l *Limiter) resetPolicy(ctx context.Context, key string, policy *Policy) error {
	key, err := normalizeKey(key)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		_, err := l.canceled(ctx, policy, nil)
		return err
	}
	err = l.store.Reset(ctx, key, *policy)
	if l.fallback != nil {
		_ = l.fallback.Reset(ctx, key, *policy)
	}
	if l.denied != nil {
		l.denied.reset(key)
	}
	for i := range l.leased {
		if t := l.leased[i]; t != nil && &l.policies[i] == policy {
			t.forget(key) // what it held, the store forgot
		}
	}
	if err != nil {
		if callerDone(ctx) {
			_, err := l.canceled(ctx, policy, err)
			return err
		}
		return fmt.Errorf("ratelimit: reset under %q: %w", policy.Name, storeErr(err))
	}
	return nil
}

// probed ends the probe of b at at: ok says the store answered. A
// partition's breaker that closes starts the Limiter's degraded period,
// as the Limiter's own does (see breaker.probed).
func (l *Limiter) probed(b *breaker, ok bool, at time.Time) {
	now := l.elapsed(at)
	b.probed(ok, now)
	if ok && b != &l.brk {
		l.brk.degrade(now)
	}
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

// canceled is the answer to a caller whose ctx has ended, under policy p:
// not Allowed, and an error wrapping ctx's error (storeErr, if any, only
// as text).
func (l *Limiter) canceled(ctx context.Context, p *Policy, storeErr error) (Decision, error) {
	cause := ctx.Err()
	if cause == nil { // the deadline has passed, its timer not yet fired
		cause = context.DeadlineExceeded
	}
	err := fmt.Errorf("ratelimit: layer %q: the caller left before a decision: %w", p.Name, cause)
	if storeErr != nil {
		err = fmt.Errorf("%w (store: %v)", err, storeErr)
	}
	return Decision{Limit: p.capacity(), Policy: *p}, err
}

// failInto fills *d, which is zero, with the Decision of a store failure
// (or of a policy that could not be had) under policy p, by its
// FailClosed: a denial when it is set, else an admission; err is its Err.
func failInto(d *Decision, p *Policy, err error) {
	c := p.capacity()
	d.Limit, d.Policy, d.Source, d.Err = c, *p, SourceFailMode, err
	if fc := p.FailClosed; fc > 0 {
		d.ResetAfter, d.RetryAfter = fc, fc
	} else {
		d.Allowed, d.Remaining = true, c
	}
}

// hashKey is the key a store sees for key, a key that is not plain (see
// normalizeKey): its SHA-256, in hex.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// normalizeKey returns the key a store sees for a client key: the key
// itself when it is at most 128 bytes of printable ASCII without '{'
// or '}', and "sha256:" followed by the hex SHA-256 of the key otherwise. It
// fails with ErrInvalidOption on an empty key.
func normalizeKey(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalidOption)
	}
	if len(key) <= limits.MaxKeyLen && plainKey(key) {
		return key, nil
	}
	return hashKey(key), nil
}

// plainKey reports whether key is printable ASCII without a space, '{'
// or '}': the bytes [0x21, 0x7e] less 0x7b and 0x7d. It tests eight bytes
// at a time (the last eight overlapping the ones before when the length
// is not a multiple of eight), and a key of 8 to 16 bytes (an address)
// in one test of two words: the hot path checks every key, and a byte
// loop cost an 11-byte address 110 instructions. See plainBits.
func plainKey(key string) bool {
	n := len(key)
	switch {
	case n >= 8 && n <= 16:
		return plainBits(load64(key, 0))|plainBits(load64(key, n-8)) == 0
	case n < 8:
		for i := 0; i < n; i++ {
			if b := key[i]; b < 0x21 || b > 0x7e || b == '{' || b == '}' {
				return false
			}
		}
		return true
	}
	for i := 0; i+8 < n; i += 8 {
		if plainBits(load64(key, i)) != 0 {
			return false
		}
	}
	return plainBits(load64(key, n-8)) == 0
}

// load64 returns the eight bytes of s at i as a little-endian word (the
// compiler makes it one load).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// plainBits is 0 when each byte of w is plain (see plainKey), and has
// the high bit of a byte that is not set otherwise, by the classic word
// tests (Hacker's Delight, and Sean Anderson's "Bit Twiddling Hacks"),
// each exact as to whether any byte matches: a borrow or carry that
// crosses into the next byte starts only at a byte that matches.
func plainBits(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (w - 0x21*ones) & ^w & highs // a byte below 0x21
	above := ((w + ones) | w) & highs     // a byte above 0x7e
	x, y := w^(0x7b*ones), w^(0x7d*ones)  // a '{' or '}' is a zero byte of x or y
	braces := ((x-ones) & ^x | (y-ones) & ^y) & highs
	return below | above | braces
}
