package core

import (
	"fmt"
)

// PolicySource adjusts policies while the API runs: an operator's live
// override, a limit that shrinks under load. A Limiter built with
// WithPolicySource consults its sources on every decision, for every
// layer, after the request's own policy was chosen (Check.Policy), and
// decides by what they return; the change takes effect on the next
// request. The package overrides has sources: in process, shared through
// Redis, and driven by a load signal.
type PolicySource interface {
	// Adjust returns the policy to decide by instead of p, or p itself.
	// p.Name is the layer's name (a Limiter built by NewLimiter has one
	// layer, named as its policy). The result must keep p's Name and
	// Algorithm; the Limiter validates a result that differs from p, and
	// decides a request whose result is invalid by its FailMode, with an
	// error wrapping ErrInvalidPolicy. Adjust is called on the request's
	// goroutine: it must be safe for concurrent use, and fast (an atomic
	// load, not I/O).
	Adjust(p Policy) Policy
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

// adjust returns p as the Limiter's sources adjust it, checked.
func (l *Limiter) adjust(p Policy) (Policy, error) {
	q := p
	for _, src := range l.sources {
		q = src.Adjust(q)
	}
	if q == p {
		return p, nil
	}
	if q.Name != p.Name || q.Algorithm != p.Algorithm {
		return Policy{}, fmt.Errorf("%w: policy %q: a PolicySource changed its name or algorithm (to %q, %s)", ErrInvalidPolicy, p.Name, q.Name, q.Algorithm)
	}
	if err := q.Validate(); err != nil {
		return Policy{}, fmt.Errorf("policy %q as a PolicySource adjusted it: %w", p.Name, err)
	}
	return q, nil
}
