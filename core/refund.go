package core

import (
	"context"
	"fmt"
	"time"
)

// Refund gives back reqs[i].Cost units of layer i, for each Request with
// a Key (as for AllowLayers; Policy is ignored), to the admission that
// AllowLayers decided at the time at it returned: what a request reserved
// and did not use (see docs/settling.md). With no Key, it does nothing.
//
// The units go back into what the admission was counted in, if it still
// is (see Store.Refund): what has left the window or drained is not given
// back, and a refund never lifts a lockout. Refund an admission once: the
// store cannot tell two refunds of one admission from refunds of two
// admitted at the same microsecond. A refund is not a decision: observers
// do not hear it, shadow mode does not change it, the fallback is not
// asked.
//
// Bad input is an error wrapping ErrInvalidOption: a zero at (a fallback's
// or FailClosed's decision, which took nothing from the store), more
// Requests than layers, a cost out of range. A store failure, an open
// circuit breaker or the end of ctx is an error too, and gives nothing
// back: the units stay counted until their window passes.
func (l *Limiter) Refund(ctx context.Context, at time.Time, reqs []Request) error {
	if at.IsZero() {
		return fmt.Errorf("%w: Refund: the zero time: no store admission to refund", ErrInvalidOption)
	}
	if err := l.checkLayers("Refund", reqs, nil, false); err != nil {
		return err
	}
	c := callPool.Get().(*call)
	defer c.release()
	if c.gather(reqs) == 0 {
		return nil
	}
	if err := l.quietRequests(ctx, "Refund", c); err != nil {
		return err
	}
	rs := c.reqs[:c.n]
	for j := range rs {
		if cost, capacity := rs[j].Cost, rs[j].Policy.capacity(); cost < 1 || cost > capacity {
			return fmt.Errorf("%w: Refund: layer %q: cost %d, capacity %d", ErrInvalidOption, rs[j].Policy.Name, cost, capacity)
		}
	}
	if err := l.quietly(ctx, rs, func() error { return l.store.Refund(ctx, at, rs) }, at); err != nil {
		return err
	}
	if l.denied != nil {
		for j := range rs {
			l.denied.reset(rs[j].Key) // a denial remembered before the units came back no longer holds
		}
	}
	for j := range rs {
		if l.leased != nil && l.leased[c.layers[j]] != nil {
			l.leased[c.layers[j]].undry(rs[j].Key) // likewise a lease's
		}
	}
	return nil
}
