package sim

import (
	"context"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
)

// opsCounter counts the store operations (Take and Refund calls) of a
// fleet per second of its run.
type opsCounter struct {
	mu    sync.Mutex
	start time.Time
	now   time.Time // the fleet's clock: a Refund is dated at its grant, not now
	ops   []int64
}

func (c *opsCounter) count() {
	c.mu.Lock()
	s := int(c.now.Sub(c.start) / time.Second)
	for len(c.ops) <= s {
		c.ops = append(c.ops, 0)
	}
	c.ops[s]++
	c.mu.Unlock()
}

// serverStore is one server's view of the fleet's shared store: the real
// store underneath, the calls counted, and the units it was given (by a
// Take that allowed) and gave back (by a Refund) summed, so that what a
// server holds is given less given back less admitted.
type serverStore struct {
	core.Store
	ops *opsCounter

	mu       sync.Mutex
	given    int64
	returned int64
}

var _ core.Store = (*serverStore)(nil)

func (s *serverStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.ops.count()
	took, err := s.Store.Take(ctx, now, reqs, out)
	if err != nil {
		return took, err
	}
	var n int64
	for i := range reqs {
		if !out[i].Allowed {
			return took, nil // all or nothing: nothing taken
		}
		n += reqs[i].Cost
	}
	s.mu.Lock()
	s.given += n
	s.mu.Unlock()
	return took, nil
}

func (s *serverStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	s.ops.count()
	var n int64
	for i := range reqs {
		n += reqs[i].Cost
	}
	s.mu.Lock()
	s.returned += n
	s.mu.Unlock()
	return s.Store.Refund(ctx, at, reqs)
}

// held is what the server holds having admitted admitted units.
func (s *serverStore) held(admitted int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.given - s.returned - admitted
}
