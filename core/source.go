package core

import (
	"context"
	"fmt"

	"github.com/apigate/ratelimit/internal/limits"
)

// PolicySource chooses the policy of each request while the API runs: a
// client's plan, an operator's live override, a limit that shrinks under
// load. It is the one way to decide by another policy than the layer's. A
// Limiter built with WithPolicySource consults its sources on every
// decision, for every layer, and decides by what they return; a change
// takes effect on the next request. The package overrides has sources: in
// process, shared through Redis (package rediswatch), and driven by a load
// signal.
type PolicySource interface {
	// Adjust returns the policy to decide the request of the client key
	// by under the layer whose policy is p (p.Name is the layer's name),
	// or p itself. ctx is the request's. The result must keep p's Name and
	// Algorithm (usage carries across plans); its FailClosed is the
	// layer's, whatever the result says. The Limiter validates a result
	// that differs from p. An error, or an invalid result, decides the
	// request by the layer's FailClosed, with Decision.Err saying why, and
	// no store asked. Adjust is called on the request's goroutine: it must
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

// adjust returns p as the Limiter's sources adjust it for key, checked;
// an error wraps limits.ErrPolicy.
func (l *Limiter) adjust(ctx context.Context, key string, p Policy) (Policy, error) {
	q := p
	for _, src := range l.sources {
		var err error
		if q, err = src.Adjust(ctx, key, q); err != nil {
			return Policy{}, fmt.Errorf("%w: layer %q: %w", limits.ErrPolicy, p.Name, err)
		}
	}
	q.FailClosed = p.FailClosed
	if q == p {
		return p, nil
	}
	if q.Name != p.Name || q.Algorithm != p.Algorithm {
		return Policy{}, fmt.Errorf("%w: layer %q: a PolicySource changed its name or algorithm (to %q, %s)", limits.ErrPolicy, p.Name, q.Name, q.Algorithm)
	}
	if err := q.Validate(); err != nil {
		return Policy{}, fmt.Errorf("%w: layer %q as a PolicySource adjusted it: %w", limits.ErrPolicy, p.Name, err)
	}
	return q, nil
}
