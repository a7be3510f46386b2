package memstore

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
)

// WithCleanupInterval sets the janitor's interval, for tests (see
// withCleanupInterval).
func WithCleanupInterval(d time.Duration) Option { return withCleanupInterval(d) }

// The options' defaults and bounds, exported to the tests.
const (
	DefaultCleanupInterval = defaultCleanupInterval
	MinCleanupInterval     = minCleanupInterval
	MaxShards              = maxShards
	DefaultMaxKeys         = defaultMaxKeys
)

// TakeOne is s.Take of r alone: on the Store itself, not through the
// core.Store interface, so that it allocates no more than Take does.
func TakeOne(s *Store, ctx context.Context, now time.Time, r core.Request) (core.Decision, time.Time, error) {
	reqs, out := [1]core.Request{r}, [1]core.Decision{}
	at, err := s.Take(ctx, now, reqs[:], out[:])
	return out[0], at, err
}

// PeekOne is s.Peek of r alone, at a cost of 1, as TakeOne.
func PeekOne(s *Store, ctx context.Context, now time.Time, r core.Request) (core.Decision, error) {
	r.Cost = 1
	reqs, out := [1]core.Request{r}, [1]core.Decision{}
	err := s.Peek(ctx, now, reqs[:], out[:])
	return out[0], err
}
