package core

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Peek tells where a client stands under the layers of checks without
// spending anything, as GitHub's GET /rate_limit does: it fills out[i]
// (out must be at least as long as checks) with what the next decision of
// checks[i] would report before it spends. Remaining and ResetAfter are
// the quota as it stands; Allowed says whether a request of cost 1 would
// pass now, and RetryAfter, when not, when it would; LockedOut and its
// RetryAfter tell a lockout in force. Policy is the policy in force for
// the key, as a PolicySource adjusts it. Check.Cost is ignored.
//
// A peek writes nothing to the store (no count, no expiry moved, no
// lockout strike, no state for a client that has none), and asks it once
// for all the checks: one round trip on Redis. It is not a decision:
// observers do not hear it, the deny cache neither answers nor learns
// from it, shadow mode does not change it, and the fallback is not asked.
// So a store failure, an open circuit breaker or a PolicySource's failure
// is Peek's error (nothing was read), as are bad input (wrapping
// ErrInvalidOption: a layer index out of range or repeated, an invalid
// key, an out shorter than checks) and the end of ctx.
//
// now is the time to peek at, as for AllowN: the zero Time is the store's
// clock.
func (l *Limiter) Peek(ctx context.Context, now time.Time, checks []Check, out []Decision) error {
	if len(out) < len(checks) {
		return fmt.Errorf("%w: Peek: %d decisions for %d checks", ErrInvalidOption, len(out), len(checks))
	}
	arr, err := l.quietRequests(ctx, "Peek", checks)
	if arr == nil {
		return err // or no checks
	}
	defer putRequests(arr, len(checks))
	reqs := arr[:len(checks)]
	for i := range reqs {
		reqs[i].Cost = 1 // a peek asks about a request of cost 1
	}
	if err := l.quietly(ctx, reqs, func() error { return l.store.Peek(ctx, now, reqs, out[:len(reqs)]) }, now); err != nil {
		return err
	}
	for i := range reqs {
		out[i].Policy, out[i].Source, out[i].Err = reqs[i].Policy, SourceStore, nil
	}
	return nil
}

// quietRequests returns the requests of checks that are no decision
// (Peek, Refund, fn), in an array of reqPool that the caller gives back
// with putRequests: each layer's key, normalized, and its policy in force
// for the key; Cost left for the caller. It returns nil for no checks, and refuses
// what AllowLayers refuses: more checks than layers, a layer out of range
// or repeated, an invalid key; a PolicySource's failure and an ended ctx
// are its error too (nothing is decided, so nothing falls back).
func (l *Limiter) quietRequests(ctx context.Context, fn string, checks []Check) (*[limits.MaxLayers]Request, error) {
	if len(checks) > len(l.policies) {
		return nil, fmt.Errorf("%w: %s: %d checks for %d layers", ErrInvalidOption, fn, len(checks), len(l.policies))
	}
	if len(checks) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ratelimit: %s: %w", fn, err)
	}
	arr := reqPool.Get().(*[limits.MaxLayers]Request)
	var seen uint32
	for i := range checks {
		c := &checks[i]
		lp, err := l.layerOf(fn, i, c, &seen)
		if err != nil {
			putRequests(arr, i)
			return nil, err
		}
		key, err := normalizeKey(c.Key)
		if err != nil {
			putRequests(arr, i)
			return nil, fmt.Errorf("layer %q: %w", lp.Name, err)
		}
		r := &arr[i]
		r.Key, r.Policy = key, *lp
		if l.sources != nil {
			if r.Policy, _, err = l.adjust(ctx, c.Key, *lp); err != nil {
				putRequests(arr, i+1)
				return nil, fmt.Errorf("ratelimit: %s: %w", fn, err)
			}
		}
	}
	return arr, nil
}

// putRequests gives arr, of which n requests were filled, back to
// reqPool, without their keys and policies.
func putRequests(arr *[limits.MaxLayers]Request, n int) {
	clear(arr[:n])
	reqPool.Put(arr)
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
