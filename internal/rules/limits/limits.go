// Package limits holds the bounds a core.Policy, a key and a layered
// request must keep, and the small helpers on a policy's plain fields, so
// that core and the stores share them without an import cycle. It imports
// nothing of the module: its functions take a policy's fields, not a
// core.Policy.
package limits

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// Bounds that core.Policy.Validate and the Limiter enforce.
const (
	// MaxLimit bounds Limit and Burst, keeping every count exact in the
	// float64 arithmetic that Redis Lua scripts use.
	MaxLimit = 1_000_000_000_000
	// MaxLogLimit bounds Limit for SlidingWindowLog, which stores one entry
	// per admitted request unit.
	MaxLogLimit = 100_000
	// MinWindow and MaxWindow bound Window.
	MinWindow = time.Millisecond
	MaxWindow = 366 * 24 * time.Hour
	// MaxNameLen bounds Policy.Name.
	MaxNameLen = 64
	// MaxKeyLen is the longest key a store sees: a longer one (or one with
	// bytes outside printable ASCII, or braces) arrives as its SHA-256 digest.
	MaxKeyLen = 128
	// MaxLayers is the most layers (policies) a Limiter has, and so the
	// most requests a store decides in one Take.
	MaxLayers = 16

	// MinLockout and MaxLockout bound the lockout and its cap.
	MinLockout = time.Millisecond
	MaxLockout = MaxWindow
	// MaxLockoutMemory bounds the lockout memory: two years of 366 days.
	MaxLockoutMemory = 2 * MaxWindow
	// DefaultLockoutMemory is how long strikes are remembered when the
	// memory is 0, unless twice the longest lockout is longer.
	DefaultLockoutMemory = 24 * time.Hour
	// MaxStrikes is the most strikes a store counts: the lockout has long
	// reached any cap by then.
	MaxStrikes = 64

	// MaxOverrideScale is the largest overrides.Override.Scale.
	MaxOverrideScale = 1e6
	// MaxOverrideText is the longest text overrides.Parse reads (and
	// rediswatch reads from Redis).
	MaxOverrideText = 256
)

// The algorithms' names, as core.Algorithm spells them.
const (
	FixedWindow          = "fixed_window"
	SlidingWindowLog     = "sliding_window_log"
	SlidingWindowCounter = "sliding_window_counter"
	TokenBucket          = "token_bucket"
	LeakyBucket          = "leaky_bucket"
)

// Algorithms returns every supported algorithm's name, in a stable order,
// in a new slice of T (core.Algorithm, or string).
func Algorithms[T ~string]() []T {
	return []T{FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket}
}

// Known reports whether algo is one of the supported algorithms.
func Known[T ~string](algo T) bool {
	switch algo {
	case FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket:
		return true
	}
	return false
}

// IsBucket reports whether algo is a token or leaky bucket, the algorithms
// that take a Burst.
func IsBucket[T ~string](algo T) bool { return algo == TokenBucket || algo == LeakyBucket }

// Capacity is the largest cost a policy can ever admit at once: Burst (or
// Limit when Burst is 0) for the buckets, Limit for the windows. It is also
// the Limit reported in every Decision.
func Capacity[T ~string](algo T, limit, burst int64) int64 {
	if burst > 0 && IsBucket(algo) {
		return burst
	}
	return limit
}

// Derive returns the limit and burst of a policy derived from one of
// algo with limit per window and burst: both multiplied by f when f is
// above 0 and not 1 (each rounded down, at least 1, at most MaxLimit),
// then clamped down to the nearest values a valid policy can have: a
// sliding log's limit to MaxLogLimit, a bucket's burst to what its rate
// refills within MaxWindow (MaxBurst). It is the one derivation of every
// source of policies (overrides, the load signal, reputation bands) and
// the Limiter's clamp of every source's result (f = 1). It only lowers
// and rounds down: a scale below 1 never loosens, and a limit below 1 or
// a window out of range, which no clamp makes valid without loosening,
// is left for Validate to refuse.
func Derive[T ~string](algo T, limit int64, window time.Duration, burst int64, f float64) (int64, int64) {
	if f > 0 && f != 1 {
		limit = Scale(limit, f)
		if burst > 0 {
			burst = Scale(burst, f)
		}
	}
	if limit > MaxLimit {
		limit = MaxLimit
	}
	if algo == SlidingWindowLog && limit > MaxLogLimit {
		limit = MaxLogLimit
	}
	if burst > limit && limit >= 1 && window >= MinWindow && window <= MaxWindow {
		// MaxBurst is at least limit for a window up to MaxWindow: a
		// clamped burst never falls below the limit.
		burst = min(burst, MaxBurst(limit, window))
	}
	return limit, burst
}

// MaxBurst is the largest burst a bucket refilled at limit per window
// fills from empty within MaxWindow, as core.Policy.Validate counts it
// (the window in whole microseconds): floor(MaxWindow*limit/window), at
// most MaxLimit. A limit or window out of range gives MaxLimit.
func MaxBurst(limit int64, window time.Duration) int64 {
	w := uint64(window.Microseconds())
	if limit < 1 || window.Microseconds() < 1 {
		return MaxLimit
	}
	hi, lo := bits.Mul64(uint64(MaxWindow.Microseconds()), uint64(limit))
	if hi >= w { // a quotient of 64 bits or more
		return MaxLimit
	}
	q, _ := bits.Div64(hi, lo, w)
	return int64(min(q, MaxLimit))
}

// Scale is n*f rounded down, in [1, MaxLimit]: a scaled limit is never
// looser than the scale asks (3 at 0.5 is 1, not 2), and never 0. A
// product within a few float64 ulps of an integer (1e-15 of it) is that
// integer, so that 0.003 of 1,000, 2.9999999999999996 in float64, is 3:
// the error of the decimal scale's binary form and of the product, not a
// fraction anyone asked for.
func Scale(n int64, f float64) int64 {
	v := float64(n) * f
	if r := math.Round(v); math.Abs(v-r) <= 1e-15*max(1, r) {
		v = r
	}
	v = math.Floor(v)
	switch {
	case v < 1:
		return 1
	case v > MaxLimit:
		return MaxLimit
	}
	return int64(v)
}

// DefaultName is the name a Limiter gives a policy whose Name is empty,
// such as "token_bucket-300-per-1h0m0s".
func DefaultName[T ~string](algo T, limit int64, window time.Duration, burst int64) string {
	name := string(algo) + "-" + strconv.FormatInt(limit, 10) + "-per-" + window.String()
	if burst > 0 {
		name += "-burst-" + strconv.FormatInt(burst, 10)
	}
	return name
}

// LockoutCap returns the longest lockout: most, or first when most is 0.
func LockoutCap(first, most time.Duration) time.Duration {
	if most > 0 {
		return most
	}
	return first
}

// LockoutMemory returns how long strikes are remembered after the last
// offence: memory, or its default when memory is 0 (DefaultLockoutMemory, or
// twice the longest lockout if that is longer, at most MaxLockoutMemory). It
// is 0 when first is 0 (no lockout).
func LockoutMemory(first, most, memory time.Duration) time.Duration {
	if first <= 0 {
		return 0
	}
	if memory > 0 {
		return memory
	}
	return min(max(DefaultLockoutMemory, 2*LockoutCap(first, most)), MaxLockoutMemory)
}

// LockoutLength returns the length of the lockout that the strike-th
// offence remembered starts (strike counts from 1): first doubled strike-1
// times, capped at LockoutCap, to the microsecond as the stores count it,
// computed without overflow. It is 0 when first is 0 or strike is below 1.
func LockoutLength(first, most time.Duration, strike int) time.Duration {
	if first <= 0 || strike < 1 {
		return 0
	}
	d, limit := first.Truncate(time.Microsecond), LockoutCap(first, most).Truncate(time.Microsecond)
	if shift := strike - 1; shift < 62 && d <= limit>>shift {
		return d << shift
	}
	return limit
}

// The marks of Decision.Err, for the exporters to tell the kinds of
// degraded decision apart (a bounded metric label). Users read the text,
// or errors.Is(d.Err, context.DeadlineExceeded) for a timeout.
var (
	// ErrStore is wrapped by the Err of a decision the store failed to
	// make (its error, a timeout included, wrapped too).
	ErrStore = errors.New("ratelimit: store failed")
	// ErrCircuitOpen is wrapped, with ErrStore, by the Err of a decision
	// made without asking the store, its circuit breaker open.
	ErrCircuitOpen = errors.New("ratelimit: circuit breaker open")
	// ErrPolicy is wrapped by the Err of a decision whose per-request
	// policy could not be had (a PolicySource's error, an invalid result).
	ErrPolicy = errors.New("ratelimit: per-request policy failed")
)

// RetryAfterSeconds returns the Retry-After of a decision in whole seconds:
// 0 when it was allowed, otherwise retryAfter rounded up, and at least 1, so
// that a denied client always waits. The headers and the 429 bodies share
// it.
func RetryAfterSeconds(allowed bool, retryAfter time.Duration) int64 {
	if allowed {
		return 0
	}
	s := int64(retryAfter / time.Second)
	if retryAfter%time.Second > 0 {
		s++
	}
	return max(s, 1)
}
