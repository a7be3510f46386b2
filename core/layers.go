package core

import (
	"context"
	"fmt"
	"time"
)

// AllowLayers decides a request under the layers it checks, all or
// nothing: reqs[i] is its Key and Cost under layer i (Limiter.Policies()[i];
// Policy is ignored), and a layer whose Key is empty, or that reqs does
// not reach, is not checked. It decides at now as AllowN does and, when
// out is not nil (at least as long as reqs), fills out[i] with layer i's
// decision, the zero Decision for a layer not checked.
//
// When any layer denies, none records the request, and one that would
// have admitted says what it has left. The returned Decision is the
// binding layer's, named by its Policy.Name: the one that denied longest
// or, when all admit, the one with least left (see docs/layers.md); its
// RetryAfter is when every layer would admit, its Delay the longest. The
// returned time is when the store decided (zero if it did not): it dates
// a Refund of the admission.
//
// Bad input wraps ErrInvalidOption (no layer checked, more Requests than
// layers, a cost out of range, an out shorter than reqs); a cost that only
// a PolicySource shrank out of range is a denial instead (see
// PolicySource). A PolicySource's failure decides by FailClosed; store
// failures, cancellation and shadow mode are as for AllowN.
func (l *Limiter) AllowLayers(ctx context.Context, now time.Time, reqs []Request, out []Decision) (d Decision, took time.Time, err error) {
	if len(reqs) > len(l.policies) || out != nil && len(out) < len(reqs) { // tested here: a call less
		return d, took, l.checkLayers("AllowLayers", reqs, out, out != nil)
	}
	c := callPool.Get().(*call)
	if c.gather(reqs) == 0 {
		c.release()
		return d, took, fmt.Errorf("%w: AllowLayers: no layer checked: every Request has an empty Key", ErrInvalidOption)
	}
	// decide asks the store once for every layer checked; verdict then
	// picks the binding layer (see binds: of several denials the longest
	// RetryAfter; when all admit the least Remaining, then the longest
	// ResetAfter) and adds a denied request's cost back to the Remaining
	// of the layers that would have admitted it.
	var own []Decision // the caller's out, when it is in the requests' order
	if out != nil && c.n == len(reqs) {
		own = out
	}
	err = l.decide(ctx, now, c, own)
	if out != nil && own == nil {
		c.scatter(reqs, out)
	}
	c.v.copyTo(&d)
	took = c.v.took
	c.release()
	return d, took, err
}

// checkLayers is fn's refusal of more Requests than layers or, when
// outToo, of an out shorter than reqs.
func (l *Limiter) checkLayers(fn string, reqs []Request, out []Decision, outToo bool) error {
	if len(reqs) > len(l.policies) {
		return fmt.Errorf("%w: %s: %d Requests for %d layers", ErrInvalidOption, fn, len(reqs), len(l.policies))
	}
	if outToo && len(out) < len(reqs) {
		return fmt.Errorf("%w: %s: %d Decisions for %d Requests", ErrInvalidOption, fn, len(out), len(reqs))
	}
	return nil
}

// verdict completes v from the decisions of reqs in v.ds: the policies,
// the Source and Err, the costs given back, the binding layer. One
// request's is inlined where it is called; several are verdictLayers'.
func (l *Limiter) verdict(reqs []Request, v *verdict, src Source, err error) {
	if len(v.ds) != 1 {
		l.verdictLayers(reqs, v, src, err)
		return
	}
	d := &v.ds[0] // the request's decision is its one layer's
	d.Policy = reqs[0].Policy
	if src != sourceKept {
		d.Source, d.Err = src, err
	}
	v.binding = 0
}

// verdictLayers is verdict of several requests.
func (l *Limiter) verdictLayers(reqs []Request, v *verdict, src Source, err error) {
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
		d.Policy = reqs[i].Policy
		if src != sourceKept {
			d.Source, d.Err = src, err
		}
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
// FailClosed, err their Err, each written in place (a Decision is large).
// One request's is its verdict already.
func (l *Limiter) failLayers(reqs []Request, v *verdict, err error) {
	for i := range reqs {
		d := &v.ds[i]
		*d = Decision{}
		failInto(d, &reqs[i].Policy, err)
	}
	if len(reqs) == 1 {
		v.binding = 0
		return
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
		v.ds[i] = notAsked(p)
		if over&(1<<i) != 0 {
			v.ds[i].Allowed, v.ds[i].RetryAfter = false, p.Window
		}
	}
	l.verdict(reqs, v, SourceStore, nil)
	for i := range v.ds {
		v.ds[i].Remaining = 0 // not the cost back that verdict gives a layer that took nothing
	}
	v.result().Remaining = 0
}

// notAsked is the decision of a layer under p that the store was not
// asked, another layer having denied the request without it: admitted,
// nothing said left (its caller zeroes Remaining after verdict) until its
// Window has passed, after which the policy in force may have changed.
func notAsked(p *Policy) Decision {
	return Decision{Allowed: true, Limit: p.capacity(), ResetAfter: p.Window}
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
