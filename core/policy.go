package core

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Algorithm names a rate-limiting algorithm. Every Store implements all five
// with the same semantics, down to the millisecond; the conformance suite in
// core/storetest proves it.
//
// Below, L is Policy.Limit, W is Policy.Window, B is the bucket capacity
// (Policy.Burst, or L when Burst is 0), c is the cost of the request and
// r = L/W is the steady rate. Times are kept in integer microseconds;
// durations in a Decision are rounded up to whole milliseconds, so a client
// that waits RetryAfter never comes back too early.
type Algorithm string

const (
	// FixedWindow counts requests in windows of length W aligned to the Unix
	// epoch. A request passes when count+c <= L; denied requests do not
	// count. Cheapest in memory (one counter), but a client may send up to 2L
	// requests across a window boundary.
	FixedWindow Algorithm = "fixed_window"

	// SlidingWindowLog remembers the time of every admitted request unit in
	// (now-W, now]. A request passes when n+c <= L; denied requests are not
	// logged. Exact, with no boundary burst, at O(L) memory per key; Limit is
	// therefore capped at 100,000.
	SlidingWindowLog Algorithm = "sliding_window_log"

	// SlidingWindowCounter keeps this and the previous epoch-aligned window's
	// counts and weighs the previous one by the part of it still inside the
	// sliding window: a request passes when prev*(W-elapsed)/W + cur + c <= L.
	// Denied requests do not count. O(1) memory, no 2L boundary burst, and an
	// approximation of the log that assumes the previous window's requests
	// were evenly spread.
	SlidingWindowCounter Algorithm = "sliding_window_counter"

	// TokenBucket holds up to B tokens, refilled continuously at rate r. A
	// request passes when at least c tokens are there, and takes them;
	// denied requests take nothing. Absorbs bursts of B, then sustains r.
	TokenBucket Algorithm = "token_bucket"

	// LeakyBucket is a queue of depth B drained at rate r. A request passes
	// when the queue has room for c more units; denied requests take nothing.
	// It shapes as well as polices: an admitted request's Decision.Delay is
	// how long it waits in the queue, so that admitted requests leave at the
	// steady rate r, however bursty their arrival.
	LeakyBucket Algorithm = "leaky_bucket"
)

// known reports whether a is one of the supported algorithms.
func (a Algorithm) known() bool { return limits.Known(a) }

// isBucket reports whether a is TokenBucket or LeakyBucket, the algorithms
// that take a Burst.
func (a Algorithm) isBucket() bool { return limits.IsBucket(a) }

// Policy says how many requests a client may make: Limit per Window, by
// Algorithm. The zero value is not valid; build policies as literals and let
// NewLimiter (or Validate) check them.
type Policy struct {
	// Name identifies the policy in the RateLimit-Policy header and in the
	// storage key: two limiters that share a store and a Name share state.
	// At most 64 characters from [A-Za-z0-9._-]. When empty,
	// NewLimiter derives one from the other fields (see DefaultName).
	Name string
	// Algorithm is one of the five Algorithm constants; empty means
	// SlidingWindowCounter: at most about Limit in any Window, in constant
	// memory. NewLimiter fills it in.
	Algorithm Algorithm
	// Limit is the number of requests (cost units) allowed per Window,
	// from 1 to 10^12.
	Limit int64
	// Window is the period Limit applies to, from 1 ms to 366 days. It
	// is used to the microsecond.
	Window time.Duration
	// Burst is the bucket capacity of TokenBucket and LeakyBucket; 0 means
	// Limit. It must stay 0 for the window algorithms, which have none. A
	// bucket must fill (or drain) from empty within 366 days: Burst/Limit
	// windows at most 366 days, so that every time and duration a store
	// computes stays exact.
	Burst int64
	// Lockout, above zero, turns the policy into a brute-force guard: a
	// client that the algorithm denies is locked out, every request of it
	// denied, for Lockout at its first offence, doubled for each offence
	// remembered, up to LockoutMax. The lockout lasts that long, or until
	// the algorithm would admit the same request again if that is later.
	// While it lasts the Decision has LockedOut set, Remaining 0 and
	// RetryAfter the time left on it. From 1 ms to 366 days; 0 locks no one
	// out (LockoutMax and LockoutMemory must then be 0). Stores count the
	// three fields to the microsecond (truncated). The lockout and strikes
	// are kept in the store beside the algorithm's state and decided in the
	// same atomic step; Limiter.Reset forgets them. They are not part of the
	// storage key: limiters that share a store and a Name share them.
	Lockout time.Duration
	// LockoutMax caps the escalation, from Lockout to 366 days; 0 means
	// Lockout: no escalation.
	LockoutMax time.Duration
	// LockoutMemory is how long strikes are remembered after the last
	// offence: at least the longest lockout, at most 732 days. 0 means
	// 24 hours, or twice the longest lockout if that is longer.
	LockoutMemory time.Duration
	// FailClosed says what the Limiter decides under this policy when its
	// store fails, times out or is not asked (an open circuit breaker), and
	// no fallback store decides (WithFallback). 0, the default, fails open:
	// the request is admitted, as in Kong and Envoy, so that an outage of
	// the rate limiter is not an outage of the API. Above zero, it fails
	// closed: the request is denied, with RetryAfter and ResetAfter
	// FailClosed, from 1 ms to 366 days: a login guard that must not open
	// during an outage, on a Limiter that fails open for the rest of the
	// API. A request is admitted only when every layer that applies fails
	// open. Either way Decision.Source is SourceFailMode and Decision.Err
	// says why, and the call's error is nil. A PolicySource cannot change
	// it: a layer fails as it was configured.
	FailClosed time.Duration

	// Lease, above zero, leases the layer's quota to each Limiter that
	// shares it (see docs/leases.md): a Limiter takes a share of the
	// quota from the store in one step, decides from it in process, renews
	// it before it runs out and gives back what it did not use, so that a
	// hot key (a layer for the whole API) costs a few store calls a Lease
	// rather than one a request. Lease is the longest a share lives, from
	// 1 ms to Window. FixedWindow and SlidingWindowCounter admit no more
	// than without leases (a share never outlives the window it was taken
	// in); TokenBucket admits at most Lease times the rate more in any
	// interval: Window/100 keeps that at 1% of Limit. SlidingWindowLog and
	// LeakyBucket, which date every admission, and a Lockout, which
	// strikes each denial in the store, cannot be leased. 0, the default,
	// asks the store for every request.
	Lease time.Duration
}

// Validate reports whether p is usable, wrapping ErrInvalidOption with the
// reason when it is not. An empty Algorithm is checked as
// SlidingWindowCounter, the default.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: policy: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if p.Algorithm == "" {
		p.Algorithm = SlidingWindowCounter
	}
	if !p.Algorithm.known() {
		return bad("unknown algorithm %q (one of %s; empty means %s)", string(p.Algorithm), strings.Join(limits.Algorithms[string](), ", "), SlidingWindowCounter)
	}
	if p.Limit < 1 || p.Limit > limits.MaxLimit {
		return bad("limit %d is out of range [1, %d]", p.Limit, int64(limits.MaxLimit))
	}
	if p.Algorithm == SlidingWindowLog && p.Limit > limits.MaxLogLimit {
		return bad("limit %d is above %d, the most a sliding window log keeps per key; use %s", p.Limit, limits.MaxLogLimit, SlidingWindowCounter)
	}
	if p.Window < limits.MinWindow || p.Window > limits.MaxWindow {
		return bad("window %v is out of range [%v, %v]", p.Window, limits.MinWindow, limits.MaxWindow)
	}
	if p.Burst < 0 || p.Burst > limits.MaxLimit {
		return bad("burst %d is out of range [0, %d]", p.Burst, int64(limits.MaxLimit))
	}
	if p.Burst != 0 && !p.Algorithm.isBucket() {
		return bad("burst applies to %s and %s only, not %s", TokenBucket, LeakyBucket, p.Algorithm)
	}
	if !refillsWithin(p.Limit, p.Window, p.Burst) {
		return bad("burst %d takes more than limits.MaxWindow (366 days) to fill at %d per %v; lower the burst or raise the rate", p.Burst, p.Limit, p.Window)
	}
	if reason := p.lockoutInvalid(); reason != "" {
		return bad("%s", reason)
	}
	if reason := p.leaseInvalid(); reason != "" {
		return bad("%s", reason)
	}
	if p.FailClosed != 0 && (p.FailClosed < limits.MinWindow || p.FailClosed > limits.MaxWindow) {
		return bad("fail-closed retry %v is out of range [%v, %v] (0 fails open)", p.FailClosed, limits.MinWindow, limits.MaxWindow)
	}
	if len(p.Name) > limits.MaxNameLen {
		return bad("name is %d bytes long, more than %d", len(p.Name), limits.MaxNameLen)
	}
	for i := 0; i < len(p.Name); i++ {
		if !nameByte(p.Name[i]) {
			return bad("name %q has a character outside [A-Za-z0-9._-]", p.Name)
		}
	}
	return nil
}

// refillsWithin reports whether a bucket of burst units, refilled at limit
// per window (both in range), fills from empty within 366 days:
// burst*window/limit <= 366 days, with the window in whole microseconds,
// as the stores use it. Any burst up to limit does. Beyond 366 days, the
// time a bucket takes to fill (ResetAfter, the state's lifetime) would
// overflow the stores' microsecond arithmetic and its float64 exactness.
func refillsWithin(limit int64, window time.Duration, burst int64) bool {
	if burst <= limit || limit < 1 || window < 0 {
		return true
	}
	hi, lo := bits.Mul64(uint64(burst), uint64(window.Microseconds()))
	mhi, mlo := bits.Mul64(uint64(limits.MaxWindow.Microseconds()), uint64(limit))
	return hi < mhi || hi == mhi && lo <= mlo
}

func nameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
}

// capacity is the largest cost p can ever admit at once: Burst (or Limit
// when Burst is 0) for the buckets, Limit for the windows. It is also the
// Limit reported in every Decision.
func (p Policy) capacity() int64 { return limits.Capacity(p.Algorithm, p.Limit, p.Burst) }

// defaultName is the name NewLimiter gives a policy whose Name is empty,
// such as "token_bucket-300-per-1h0m0s".
func (p Policy) defaultName() string {
	return limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)
}
