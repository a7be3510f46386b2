package limitertest

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// Timed is a store that decides through Store, a memory store, at the
// real time, and says it decided at At; or, when Err is set, Take fails
// with Err.
type Timed struct {
	*memstore.Store
	At  time.Time
	Err error
}

// Take decides reqs through the memory store and returns At, or fails with
// Err.
func (s *Timed) Take(ctx context.Context, _ time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if s.Err != nil {
		return time.Time{}, s.Err
	}
	_, err := s.Store.Take(ctx, time.Time{}, reqs, out)
	return s.At, err
}
