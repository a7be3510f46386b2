package limitertest

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// Timed is a core.TimedStore of its own type: it decides through Store, a
// memory store, at the real time, and says it decided at At; or, when Err
// is set, TakeTimed fails with Err.
type Timed struct {
	*memstore.Store
	At  time.Time
	Err error
}

// TakeTimed decides req through the memory store and returns At, or fails
// with Err.
func (s *Timed) TakeTimed(ctx context.Context, req core.Request) (core.Decision, time.Time, error) {
	if s.Err != nil {
		return core.Decision{}, time.Time{}, s.Err
	}
	d, err := s.Store.Take(ctx, req)
	return d, s.At, err
}

// TimedStore returns s.
func (s *Timed) TimedStore() core.TimedStore { return s }
