package core

import (
	"context"
	"fmt"
	"time"
)

// Peek tells where a client stands under the layers reqs checks, without
// spending anything: reqs[i] names the client of layer i by its Key (as
// for AllowLayers; Cost and Policy are ignored), and Peek fills out[i]
// (out at least as long as reqs; the zero Decision for a layer not
// checked) with what layer i would report at now (as for AllowN) before
// it spends: Remaining and ResetAfter as the quota stands, Allowed and
// RetryAfter for a request of cost 1, LockedOut during a lockout, Policy
// as a PolicySource adjusts it. With no layer checked, Peek does nothing.
//
// A peek writes nothing to the store (see Store.Peek) and asks it once for
// all the layers. It is not a decision: observers, the deny cache, shadow
// mode and the fallback play no part. So a store failure, an open circuit
// breaker, a PolicySource's failure and the end of ctx are Peek's error,
// as is bad input (wrapping ErrInvalidOption: more Requests than layers,
// an out shorter than reqs).
func (l *Limiter) Peek(ctx context.Context, now time.Time, reqs []Request, out []Decision) error {
	if err := l.checkLayers("Peek", reqs, out, true); err != nil {
		return err
	}
	c := callPool.Get().(*call)
	defer c.release()
	if c.gather(reqs) == 0 {
		clear(out[:len(reqs)])
		return nil
	}
	for j := range c.n {
		c.reqs[j].Cost = 1 // a peek asks about a request of cost 1
	}
	if err := l.quietRequests(ctx, "Peek", c); err != nil {
		return err
	}
	ds := c.ds[:c.n]
	if err := l.quietly(ctx, c.reqs[:c.n], func() error { return l.store.Peek(ctx, now, c.reqs[:c.n], ds) }, now); err != nil {
		return err
	}
	for j := range ds {
		ds[j].Policy, ds[j].Source, ds[j].Err = c.reqs[j].Policy, SourceStore, nil
	}
	c.scatter(reqs, out)
	return nil
}

// quietRequests makes c's requests ready for fn, a call that decides
// nothing (Peek, Refund): each layer's key, normalized, and its policy in
// force for the key; Cost is the caller's. It refuses an invalid key; a
// PolicySource's failure and an ended ctx are its error too (nothing is
// decided, so nothing falls back).
func (l *Limiter) quietRequests(ctx context.Context, fn string, c *call) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratelimit: %s: %w", fn, err)
	}
	for j := range c.n {
		r := &c.reqs[j]
		lp := &l.policies[c.layers[j]]
		key, err := normalizeKey(r.Key)
		if err != nil {
			return fmt.Errorf("layer %q: %w", lp.Name, err)
		}
		r.Policy = *lp
		if l.sources != nil {
			if _, err = l.adjust(ctx, r.Key, lp, &r.Policy); err != nil {
				return fmt.Errorf("ratelimit: %s: %w", fn, err)
			}
		}
		r.Key = key
	}
	return nil
}

// quietly asks the store about reqs, at now, by ask: a Peek or a
// Refund. An open circuit breaker is the error without asking; a store
// failure is the error, the caller's cancellation when it has left.
// Neither counts toward the breaker, nor is decided otherwise.
func (l *Limiter) quietly(ctx context.Context, reqs []Request, ask func() error, now time.Time) error {
	if l.open(reqs, now) {
		return l.openErr
	}
	err := ask()
	if err == nil {
		return nil
	}
	if callerDone(ctx) {
		_, err = l.canceled(ctx, &reqs[0].Policy, err)
		return err
	}
	return storeErr(err)
}
