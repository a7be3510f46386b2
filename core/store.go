package core

import (
	"context"
	"fmt"
	"time"
)

// Decision is the answer to one request: may it pass, and what to tell the
// client. Durations are whole milliseconds, rounded up.
type Decision struct {
	// Allowed reports whether the request may pass.
	Allowed bool
	// Limit is the policy's Capacity: the most Remaining can ever be.
	Limit int64
	// Remaining is how many more cost units would pass right now.
	Remaining int64
	// ResetAfter is the time until the quota is whole again (Remaining ==
	// Limit); 0 when it already is.
	ResetAfter time.Duration
	// RetryAfter is 0 when Allowed; otherwise the earliest time after which
	// the same request (same cost) would pass, had nothing else happened.
	RetryAfter time.Duration
	// Delay is set by LeakyBucket on admitted requests: how long the request
	// should wait before it proceeds, so that admitted requests leave at the
	// policy's steady rate. 0 for every other algorithm.
	Delay time.Duration
	// Policy is the policy that decided, with its Name filled in.
	Policy Policy
	// FailedOpen reports an Allowed decision that the store could not make:
	// the Limiter's FailMode let the request through. Limit, Remaining and
	// the durations then carry no information.
	FailedOpen bool
	// Fallback reports a decision made by the Limiter's fallback store
	// (WithFallback): because its store failed or its circuit breaker is
	// open, a real decision but from this process's counts alone; or,
	// while the Limiter is Recovering, a refusal of a request the store
	// admitted.
	Fallback bool
	// Cached reports a denial answered from the Limiter's deny cache
	// (WithDenyCache) without asking the store.
	Cached bool
}

// Request is one question a Limiter asks its Store.
type Request struct {
	// Key identifies the client. The Limiter has checked it: never empty,
	// at most MaxKeyLen bytes of printable ASCII with no '{' or '}'.
	Key string
	// Policy has been validated and has a Name.
	Policy Policy
	// Cost is in [1, Policy.Capacity()].
	Cost int64
	// Now is the time of the decision. The zero Time means the store's own
	// clock: time.Now for memory, Redis TIME for Redis, so that app servers
	// with skewed clocks still agree. Tests set it to make time explicit.
	Now time.Time
}

// Validate reports whether r keeps the contract above, wrapping
// ErrInvalidKey, ErrInvalidPolicy, ErrInvalidCost or ErrCostExceedsLimit.
// Stores call it on requests that do not come from a Limiter (which sends
// only valid ones), so that bad input is an error, never a panic.
func (r Request) Validate() error {
	if r.Key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if err := r.Policy.Validate(); err != nil {
		return err
	}
	if r.Cost < 1 {
		return fmt.Errorf("%w: cost %d is not positive", ErrInvalidCost, r.Cost)
	}
	if c := r.Policy.Capacity(); r.Cost > c {
		return fmt.Errorf("%w: cost %d, capacity %d", ErrCostExceedsLimit, r.Cost, c)
	}
	return nil
}

// Store holds rate-limit state and decides atomically. Implementations must
// be safe for concurrent use, implement every Algorithm with the semantics
// documented on its constant, and pass the suite in core/storetest.
type Store interface {
	// Take decides one request and, when it is allowed, records it, as one
	// atomic step. A denied request changes nothing. Take does not fill
	// Decision.Policy or Decision.FailedOpen; the Limiter does.
	Take(ctx context.Context, req Request) (Decision, error)
	// Reset forgets all state of key under policy, so the client's next
	// request finds a whole quota.
	Reset(ctx context.Context, key string, policy Policy) error
}

// NonBlocking is implemented by stores that answer from process memory and
// never wait on I/O, such as memstore. The Limiter calls them directly,
// without the goroutine and timer that bound calls to other stores.
type NonBlocking interface {
	Store
	// NonBlocking is a marker; it does nothing.
	NonBlocking()
}

// DeadlineAware is implemented by stores that may honour their context's
// deadline, such as redisstore over a go-redis client built with
// ContextTimeoutEnabled. When HonorsDeadline reports true, the Limiter
// calls Take on the caller's goroutine with its timeout as the context's
// deadline, sparing the goroutine and channel that otherwise bound the
// call; the store promises to return promptly once the deadline passes.
type DeadlineAware interface {
	Store
	// HonorsDeadline reports whether every Take returns promptly once its
	// context's deadline has passed.
	HonorsDeadline() bool
}
