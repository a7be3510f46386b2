package core

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Check is one layer's part of a request to AllowLayers: the client key
// and cost under that layer. A layer that does not apply to the request
// has no Check.
type Check struct {
	// Layer is the index of the layer in Limiter.Policies().
	Layer int
	// Key identifies the client under this layer (see Limiter.AllowN).
	Key string
	// Cost is the units the request takes from this layer, in [1, the
	// policy's capacity]. A policy chosen per request (a premium plan, a
	// per-API-key quota) is a PolicySource's.
	Cost int64
}

// reqPool holds the arrays of requests that Peek and Refund hand the store.
var reqPool = sync.Pool{New: func() any { return new([limits.MaxLayers]Request) }}

// AllowLayers decides a request made of checks, one per layer that applies
// (at most one per layer), at now as AllowN does, fills out[i] with the
// decision of checks[i] when out is not nil (it must then be at least as
// long as checks), and returns the request's decision and, when the store
// decided, the time it decided at (the zero Time otherwise): the time that
// dates a Refund of the admission and, from a store that decides in
// process (see Store.Take), spares a caller writing an absolute time such
// as X-RateLimit-Reset a reading of the clock.
//
// The request is admitted only when every layer admits it; when any
// denies, no layer records it, and a layer that would have admitted it
// took nothing: its decision is Allowed, and says what it has left. The
// request's decision is the binding layer's, its Policy.Name naming it:
// the layer that denied (of several, the one whose denial lasts longest),
// or, when all admit, the one closest to denying (the least Remaining; of
// equals, the longest ResetAfter); Allowed is the request's, RetryAfter the
// time at which every layer would admit it, and Delay the longest of the
// layers'. A request with no check passes, without a store call.
//
// A cost above the capacity of the policy in force, but within a policy
// configured for the request (the layer's own, or one a PolicySource
// returned before another shrank it), is a denial, not an error: the
// request is denied without asking the store, takes nothing from any
// layer, and the layer's RetryAfter is its Window.
//
// Bad input (a layer index out of range or repeated, an empty key, a cost
// out of range, an out shorter than checks) returns an error wrapping
// ErrInvalidOption. A PolicySource's failure, or an invalid policy from
// one, decides the request by the layers' FailClosed, Decision.Err saying
// why. Store failures, the caller's cancellation and shadow mode are as
// for AllowN.
func (l *Limiter) AllowLayers(ctx context.Context, now time.Time, checks []Check, out []Decision) (Decision, time.Time, error) {
	if out != nil && len(out) < len(checks) {
		return Decision{}, time.Time{}, fmt.Errorf("%w: AllowLayers: %d decisions for %d checks", ErrInvalidOption, len(out), len(checks))
	}
	if len(checks) > len(l.policies) {
		return Decision{}, time.Time{}, fmt.Errorf("%w: AllowLayers: %d checks for %d layers", ErrInvalidOption, len(checks), len(l.policies))
	}
	if len(checks) == 0 {
		return Decision{Allowed: true, Source: SourceStore}, time.Time{}, nil
	}
	c := callPool.Get().(*call)
	err := l.decide(ctx, now, c, checks, out)
	var d Decision
	c.v.copyTo(&d)
	took := c.v.took
	c.release(len(checks))
	return d, took, err
}

// layerOf returns the policy of the layer check i of checks given to fn
// (AllowLayers, Peek) names: a layer in range that no check before it
// named (seen, the layers named so far, is updated); otherwise badCheck's
// error. (A call a layer: callgrind counts AllowLayers of 4 layers alike,
// 6 076 and 6 080 instructions, before and after it was shared.)
func (l *Limiter) layerOf(fn string, i int, c *Check, seen *uint32) (*Policy, error) {
	if uint(c.Layer) >= uint(len(l.policies)) || *seen&(1<<c.Layer) != 0 {
		return nil, l.badCheck(fn, i, c)
	}
	*seen |= 1 << c.Layer
	return &l.policies[c.Layer], nil
}

// badCheck is layerOf's error for a layer out of range or named twice.
func (l *Limiter) badCheck(fn string, i int, c *Check) error {
	if c.Layer < 0 || c.Layer >= len(l.policies) {
		return fmt.Errorf("%w: %s: check %d names layer %d of %d", ErrInvalidOption, fn, i, c.Layer, len(l.policies))
	}
	return fmt.Errorf("%w: %s: two checks for layer %q", ErrInvalidOption, fn, l.policies[c.Layer].Name)
}

// verdict completes v from the decisions of reqs in v.ds: the policies,
// the Source and Err, the costs given back, the binding layer.
func (l *Limiter) verdict(reqs []Request, v *verdict, src Source, err error) {
	if len(v.ds) == 1 { // the request's decision is its one layer's
		d := &v.ds[0]
		d.Policy, d.Source, d.Err = reqs[0].Policy, src, err
		v.binding = 0
		return
	}
	allowed := true
	for i := range v.ds {
		if !v.ds[i].Allowed {
			allowed = false
			break
		}
	}
	b := -1
	var delay time.Duration
	for i := range v.ds {
		d := &v.ds[i]
		d.Policy, d.Source, d.Err = reqs[i].Policy, src, err
		if d.Allowed {
			delay = max(delay, d.Delay)
			if !allowed { // it took nothing: what it has left is its cost more
				d.Remaining = min(d.Remaining+reqs[i].Cost, d.Limit)
				d.Delay = 0
			}
		}
		if b < 0 || binds(d, &v.ds[b], allowed) {
			b = i
		}
	}
	v.binding = b
	v.Decision = v.ds[b]
	v.Allowed = allowed
	if allowed {
		v.Delay = delay
	}
}

// binds reports whether d binds before e: when the request is denied,
// a denial that lasts longer; when it is admitted, less left.
func binds(d, e *Decision, allowed bool) bool {
	if !allowed {
		if d.Allowed != e.Allowed {
			return !d.Allowed
		}
		return d.RetryAfter > e.RetryAfter
	}
	if d.Remaining != e.Remaining {
		return d.Remaining < e.Remaining
	}
	return d.ResetAfter > e.ResetAfter
}

// failLayers fills v with the decisions of reqs by each layer's
// FailClosed, err their Err.
func (l *Limiter) failLayers(reqs []Request, v *verdict, err error) {
	for i := range reqs {
		v.ds[i] = l.failedAs(&reqs[i].Policy, err)
	}
	l.verdict(reqs, v, SourceFailMode, err)
}

// overLayers fills v for reqs, some of which (the bits of over) cost more
// than their policy's capacity: a request that could not pass under the
// policies in force (a plan, or a policy source that shrank the limit),
// denied without asking the store, so that it takes nothing from any
// layer. Each such layer denies it with RetryAfter its Window, after which
// the policy in force may have changed. The store was not asked what the
// others have left: they say nothing left until their Window has passed,
// so that a client that heeds them is never surprised.
func (l *Limiter) overLayers(reqs []Request, over uint32, v *verdict) {
	for i := range reqs {
		p := &reqs[i].Policy
		v.ds[i] = Decision{Allowed: over&(1<<i) == 0, Limit: p.capacity(), ResetAfter: p.Window}
		if !v.ds[i].Allowed {
			v.ds[i].RetryAfter = p.Window
		}
	}
	l.verdict(reqs, v, SourceStore, nil)
	for i := range v.ds {
		v.ds[i].Remaining = 0 // not the cost back that verdict gives a layer that took nothing
	}
	v.result().Remaining = 0
}

// observeLayers reports a layered request: one Event per layer that
// applied, the binding layer's with the request's decision, the others'
// with their own; a request that decided nothing (err) is reported once,
// under its first layer.
func (l *Limiter) observeLayers(reqs []Request, p *watch, v *verdict, err error) {
	if err != nil || len(reqs) == 1 {
		p.key = reqs[v.binding].Key
		l.observeAs(reqs[v.binding].Cost, p, v.result(), err, true)
		return
	}
	for i := range reqs {
		p.key = reqs[i].Key
		if i == v.binding {
			l.observeAs(reqs[i].Cost, p, &v.Decision, nil, true)
			continue
		}
		l.observeAs(reqs[i].Cost, p, &v.ds[i], nil, false)
	}
}
