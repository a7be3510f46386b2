package limitertest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Counting is a Store that counts the decisions and the refunds it is
// asked for and passes them on to Store (over one Redis, each is one
// round trip).
type Counting struct {
	core.Store
	takes, refunds atomic.Int64
}

// Take counts the call and asks the wrapped store.
func (c *Counting) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, now, reqs, out)
}

// Takes returns how many decisions the store was asked for.
func (c *Counting) Takes() int64 { return c.takes.Load() }

// Refund counts the call and asks the wrapped store.
func (c *Counting) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	c.refunds.Add(1)
	return c.Store.Refund(ctx, at, reqs)
}

// Refunds returns how many refunds the store was asked for.
func (c *Counting) Refunds() int64 { return c.refunds.Load() }
