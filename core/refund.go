package core

import (
	"context"
	"fmt"
	"time"
)

// Refund gives back what an admitted request took and did not use:
// reqs[i].Cost units of layer i for each Request with a Key (see
// AllowLayers; Policy is ignored), from the admission that AllowLayers
// decided at the time at it returned. It is how a cost known only after
// the work is settled: reserve the most the work may cost, then refund
// what it did not (httplimit's Layer.Counts settles a response this way).
// With no layer given back, Refund does nothing.
//
// The units go back into what the admission was counted in, if it is
// still counted there: the same fixed window, the sliding counter's
// window, the sliding log's entry, the buckets' level less what has
// drained since. What has left the window or drained is not given back,
// so a late refund frees nothing that time has not freed already, and a
// refund never lifts a lockout. Refund the units of one admission once:
// the store cannot tell two refunds of one admission from refunds of two
// admitted at the same microsecond.
//
// A refund is not a decision: observers do not hear it, shadow mode does
// not change it, and the fallback is not asked. Bad input is an error
// wrapping ErrInvalidOption: a zero at (the admission was not the
// store's: a fallback's or FailClosed's decision, which took nothing from
// the store), more Requests than layers, a cost out of range. So are a
// store failure, an open circuit breaker and the end of ctx; nothing is
// then given back, and the units stay counted until their window passes,
// as they would have without a refund.
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
	return nil
}
