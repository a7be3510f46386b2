// Package outcome names what became of a decision, for the exporters and
// the monitoring rules: the bounded label values of
// ratelimit_decisions_total and its peers. core's Event carries the
// Decision; Of reads the outcome from it.
package outcome

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Outcome says what became of one layer of one call to a Limiter.
type Outcome uint8

const (
	Allowed         Outcome = iota // the store admitted the request
	Denied                         // the store denied it
	DenyCache                      // the deny cache denied it, sparing the store a call
	FallbackAllowed                // the fallback store admitted it (store failed, or breaker open)
	FallbackDenied                 // the fallback store denied it (store failed, or Recovering)
	FailedOpen                     // the store failed and the policy failed open
	FailedClosed                   // the store failed and the policy's FailClosed refused it
	Canceled                       // the caller's context ended before a decision
	Invalid                        // refused for bad input; no one decided
	ShadowDenied                   // shadow mode admitted what it would have denied
	LockedOut                      // the store denied it by the policy's Lockout
	AllowListed                    // the HTTP flow admitted it by an allow list
	DenyListed                     // the HTTP flow refused it by a deny list or a ban
	count
)

// names are the Outcomes' String values, in order.
var names = [count]string{
	"allowed", "denied", "deny_cache", "fallback_allowed", "fallback_denied",
	"failed_open", "failed_closed", "canceled", "invalid",
	"shadow_denied", "locked_out", "allow_listed", "deny_listed",
}

// String returns the outcome's name as exporters label it.
func (o Outcome) String() string {
	if o < count {
		return names[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Admitted reports whether the request passed.
func (o Outcome) Admitted() bool {
	return o == Allowed || o == FallbackAllowed || o == FailedOpen || o == ShadowDenied || o == AllowListed
}

// All returns every Outcome, in order, so that an exporter can create its
// series up front (a series that appears only on the first denial hides
// the first denials from rate()).
func All() []Outcome {
	o := make([]Outcome, count)
	for i := range o {
		o[i] = Outcome(i)
	}
	return o
}

// Of is the outcome of d, the Decision of an Event.
func Of(d *core.Decision) Outcome {
	if d.Source == core.SourceStore && d.Err != nil { // nothing was decided
		if errors.Is(d.Err, core.ErrInvalidOption) {
			return Invalid
		}
		return Canceled
	}
	if d.Shadowed {
		return ShadowDenied
	}
	switch d.Source {
	case core.SourceDenyCache:
		return DenyCache
	case core.SourceFallback:
		if d.Allowed {
			return FallbackAllowed
		}
		return FallbackDenied
	case core.SourceFailMode:
		if d.Allowed {
			return FailedOpen
		}
		return FailedClosed
	case core.SourceList:
		if d.Allowed {
			return AllowListed
		}
		return DenyListed
	}
	if d.Allowed {
		return Allowed
	}
	if d.LockedOut {
		return LockedOut
	}
	return Denied
}

// NearLimit reports whether the request was admitted by a decision on the
// client's quota and left less than a fifth of the policy's capacity: a
// client close to being denied, as Envoy's near_limit counter counts it.
// A shadowed denial is past the limit, not near it; a policy that failed
// open and an allow list said nothing of the quota.
func NearLimit(d *core.Decision) bool {
	o := Of(d)
	return (o == Allowed || o == FallbackAllowed) && d.Remaining*5 < d.Limit
}

// Store error kinds, as StoreErrorKind names them.
const (
	StoreErrTimeout     = "timeout"      // the store did not answer within its timeout
	StoreErrCircuitOpen = "circuit_open" // the circuit breaker was open, the store not asked
	StoreErrFailed      = "error"        // any other failure of the store
)

// StoreErrorKind names the kind of store failure err (a Decision.Err)
// reports, for a bounded metric label: StoreErrTimeout,
// StoreErrCircuitOpen or StoreErrFailed; "" when err is no store failure
// (nil, or a PolicySource's failure).
func StoreErrorKind(err error) string {
	switch {
	case err == nil || !errors.Is(err, limits.ErrStore):
		return ""
	case errors.Is(err, limits.ErrCircuitOpen):
		return StoreErrCircuitOpen
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return StoreErrTimeout
	}
	return StoreErrFailed
}
