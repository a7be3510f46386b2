// Package clockstore is for tests: it gives a store's requests an explicit
// time (Take's now), where a test reaches the Limiter through HTTP and
// cannot call Limiter.AllowN with a time itself.
package clockstore

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
)

// At returns s with the zero now of every Take and Peek set to now, so
// that s decides at now whatever the real time. The Limiter's own clock
// (its deny cache, its circuit breaker) stays the real one. The store
// returns the time it decided at with no monotonic reading, as a store
// that decides elsewhere does (Redis): the Limiter times it, and the
// time dates refunds (core.Store.Refund).
func At(s core.Store, now time.Time) core.Store { return store{s, now} }

type store struct {
	core.Store
	now time.Time
}

// Take is the inner store's Take, a zero now set to the store's time.
func (s store) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if now.IsZero() {
		now = s.now
	}
	took, err := s.Store.Take(ctx, now, reqs, out)
	return took.Round(0), err // decided as elsewhere: a store the Limiter times
}

// Peek is the inner store's Peek, a zero now set to the store's time.
func (s store) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if now.IsZero() {
		now = s.now
	}
	return s.Store.Peek(ctx, now, reqs, out)
}
