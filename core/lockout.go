package core

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/internal/limits"
)

// Lockout turns a policy into a brute-force guard: a client that the
// algorithm denies is locked out, every request of it denied, for a while
// that doubles with each offence remembered. Login, for instance, with 5
// attempts per 15 minutes and a lockout of 30 minutes doubling up to a day:
//
//	core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
//		Lockout: &core.Lockout{Duration: 30 * time.Minute, Max: 24 * time.Hour}}
//
// The offence is a request that the algorithm denies (the sixth attempt
// above). It earns the client a strike and starts a lockout of
// Length(strikes): Duration, doubled for each strike before it, capped at
// Max. The lockout lasts that long, or until the algorithm would admit the
// same request again if that is later (a fixed window of an hour with a
// lockout of a minute locks until the window ends), so that a client that
// waits its Decision's RetryAfter and comes back is never struck again for
// it. While it lasts, every request is denied, whatever its cost, without
// touching the algorithm's state: the Decision has LockedOut set,
// Remaining 0, RetryAfter the time left on the lockout (to the
// millisecond, rounded up) and ResetAfter the later of that and the
// moment the algorithm's quota is whole again. Once it has ended, the
// algorithm decides again (its window may have refilled meanwhile), and
// its next denial is the next offence. Strikes are forgotten Memory after
// the client's last offence.
//
// The lockout and the strikes are kept in the store beside the algorithm's
// state, and decided in the same atomic step: over Redis, every app server
// enforces them, and Redis's clock times them. Limiter.Reset (and
// Store.Reset) forgets them with the algorithm's state: call it after a
// successful login to clear the client's strikes.
//
// A Policy without a Lockout (nil), or with a zero one, locks no one out
// and costs nothing for it.
type Lockout struct {
	// Duration is the first lockout, from 1 ms to 366 days; 0
	// disables lockouts (Max and Memory must then be 0). Stores use it,
	// Max and Memory to the microsecond (truncated).
	Duration time.Duration
	// Max caps the escalation: each strike doubles the lockout, up to
	// Max, from Duration to 366 days. 0 means Duration: no escalation.
	Max time.Duration
	// Memory is how long strikes are remembered after the last offence:
	// at least the longest lockout (Max, or Duration), at most
	// 732 days. A Memory no longer than the lockout forgets the
	// strikes by the time it ends, so that nothing escalates. 0 means
	// 24 hours, or twice the longest lockout if that is
	// longer.
	Memory time.Duration
}

// Enabled reports whether lo locks clients out: whether Duration is set.
func (lo Lockout) Enabled() bool { return lo.Duration > 0 }

// Cap returns the longest lockout: Max, or Duration when Max is 0.
func (lo Lockout) Cap() time.Duration {
	if lo.Max > 0 {
		return lo.Max
	}
	return lo.Duration
}

// RememberFor returns how long strikes are remembered after the last
// offence: Memory, or its default when Memory is 0 (see Memory). It is 0
// when lo is not Enabled.
func (lo Lockout) RememberFor() time.Duration {
	if !lo.Enabled() {
		return 0
	}
	if lo.Memory > 0 {
		return lo.Memory
	}
	return min(max(limits.DefaultLockoutMemory, 2*lo.Cap()), limits.MaxLockoutMemory)
}

// Length returns the length of the lockout that the strike-th offence
// remembered starts (strike counts from 1): Duration doubled strike-1
// times, capped at Cap, to the microsecond as the stores count it,
// computed without overflow. It is 0 when lo is not
// Enabled or strike is below 1.
func (lo Lockout) Length(strike int) time.Duration {
	if !lo.Enabled() || strike < 1 {
		return 0
	}
	d, limit := lo.Duration.Truncate(time.Microsecond), lo.Cap().Truncate(time.Microsecond)
	if shift := strike - 1; shift < 62 && d <= limit>>shift {
		return d << shift
	}
	return limit
}

// Validate reports whether lo is usable, wrapping ErrInvalidPolicy with
// the reason when it is not. Policy.Validate calls it.
func (lo Lockout) Validate() error {
	if reason := lo.validate(); reason != "" {
		return fmt.Errorf("%w: %s", ErrInvalidPolicy, reason)
	}
	return nil
}

// validate reports why lo is not usable, or "".
func (lo Lockout) validate() string {
	if lo.Duration == 0 {
		if lo.Max != 0 || lo.Memory != 0 {
			return fmt.Sprintf("lockout max %v and memory %v are set without a duration", lo.Max, lo.Memory)
		}
		return ""
	}
	if lo.Duration < limits.MinLockout || lo.Duration > limits.MaxLockout {
		return fmt.Sprintf("lockout duration %v is out of range [%v, %v]", lo.Duration, limits.MinLockout, limits.MaxLockout)
	}
	if lo.Max != 0 && (lo.Max < lo.Duration || lo.Max > limits.MaxLockout) {
		return fmt.Sprintf("lockout max %v is out of range [duration %v, %v]", lo.Max, lo.Duration, limits.MaxLockout)
	}
	if lo.Memory != 0 && (lo.Memory < lo.Cap() || lo.Memory > limits.MaxLockoutMemory) {
		return fmt.Sprintf("lockout memory %v is out of range [the longest lockout %v, %v]", lo.Memory, lo.Cap(), limits.MaxLockoutMemory)
	}
	return ""
}
