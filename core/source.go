package core

import (
	"context"
	"fmt"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// PolicySource chooses the policy of each request: a client's plan, a
// per-API-key quota, an operator's live override, a limit that shrinks
// under load. It is the one way to decide by another policy than the
// layer's: a Limiter built with WithPolicySource consults its sources on
// every decision, for every layer, so a change takes effect on the next
// request. Package overrides has sources (in process, shared through
// Redis, driven by load); a plan is a type of yours (see
// ExamplePolicySource and docs/layers.md).
//
// A source may raise a layer's capacity (a premium plan): a request whose
// cost fits the raised policy is decided by it. A cost above the policy in
// force but within the layer's own, or one a source returned before
// another shrank it (a plan cut by an override), is a denial, not an
// error: no store is asked, and RetryAfter is the Window.
type PolicySource interface {
	// Adjust returns the policy to decide the request of the client key
	// by under the layer whose policy is p (p.Name is the layer's name),
	// or p itself. ctx is the request's. The result must keep p's Name and
	// Algorithm (usage carries across plans); its FailClosed is the
	// layer's, whatever the result says. The Limiter clamps a result
	// that differs from p down to the nearest valid policy, never up: a
	// burst its rate cannot refill within 366 days to what it refills, a
	// limit above the most allowed to the most. An error, or a result no
	// clamp makes valid (a limit below 1, a window out of range), decides
	// the request by the layer's FailClosed, with Decision.Err saying why,
	// and no store asked. Adjust is called on the request's goroutine: it must
	// be safe for concurrent use, and fast (an atomic load or a map
	// lookup, not I/O).
	Adjust(ctx context.Context, key string, p Policy) (Policy, error)
}

// WithPolicySource makes the Limiter consult src on every decision (see
// PolicySource). Several sources apply in the order given, each to the
// policy the one before returned. A nil src is invalid.
func WithPolicySource(src PolicySource) Option {
	return func(c *config) error {
		if src == nil {
			return fmt.Errorf("%w: WithPolicySource: nil source", ErrInvalidOption)
		}
		c.sources = append(c.sources, src)
		return nil
	}
}

// adjust sets *q to *p as the Limiter's sources adjust it for key,
// checked, and returns the ceiling: the largest capacity of p and of what
// each source returned, a cost above which is the caller's mistake rather
// than a denial. An error wraps limits.ErrPolicy, *q then undefined. p
// and q are pointers, not values: a Policy is 96 bytes, and a request
// under a source copied it five times (BenchmarkGin/LimiterReputation).
func (l *Limiter) adjust(ctx context.Context, key string, p, q *Policy) (int64, error) {
	*q = *p
	ceiling := p.capacity()
	for i, src := range l.sources {
		limit, burst, window := q.Limit, q.Burst, q.Window
		res, err := src.Adjust(ctx, key, *q)
		if err != nil {
			return 0, fmt.Errorf("%w: layer %q: %w", limits.ErrPolicy, p.Name, err)
		}
		*q = res
		if q.Limit != limit || q.Burst != burst || q.Window != window {
			// The one clamp of every derived policy (limits.Derive): what
			// no valid policy keeps, a burst the rate cannot refill within
			// 366 days, a limit above the most, is lowered to the nearest
			// valid value, so that a source's scaled policy is decided by
			// the store, tighter, never by the fail mode, which admits.
			q.Limit, q.Burst = limits.Derive(q.Algorithm, q.Limit, q.Window, q.Burst, 1)
		}
		if i < len(l.sources)-1 && q.Validate() == nil {
			ceiling = max(ceiling, q.capacity()) // a plan before an override cut it
		}
	}
	q.FailClosed = p.FailClosed
	if samePolicy(q, p) {
		return ceiling, nil
	}
	if q.Name != p.Name || q.Algorithm != p.Algorithm {
		return 0, fmt.Errorf("%w: layer %q: a PolicySource changed its name or algorithm (to %q, %s)", limits.ErrPolicy, p.Name, q.Name, q.Algorithm)
	}
	if err := q.Validate(); err != nil {
		return 0, fmt.Errorf("%w: layer %q as a PolicySource adjusted it: %w", limits.ErrPolicy, p.Name, err)
	}
	return max(ceiling, q.capacity()), nil
}

// samePolicy reports whether *a == *b, testing the numbers first: a
// source that kept the policy returns its very strings, and a number
// that changed is the common difference.
func samePolicy(a, b *Policy) bool {
	return a.Limit == b.Limit && a.Window == b.Window && a.Burst == b.Burst &&
		a.Lockout == b.Lockout && a.LockoutMax == b.LockoutMax && a.LockoutMemory == b.LockoutMemory &&
		a.FailClosed == b.FailClosed && a.Lease == b.Lease && a.Name == b.Name && a.Algorithm == b.Algorithm
}
