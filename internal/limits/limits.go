// Package limits holds the bounds a core.Policy, a key and a layered
// request must keep, and the small helpers on a policy's plain fields, so
// that core and the stores share them without an import cycle. It imports
// nothing of the module: its functions take a policy's fields, not a
// core.Policy.
package limits

import (
	"errors"
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
	// most requests a store decides in one TakeAll.
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
