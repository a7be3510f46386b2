package core

import (
	"context"
	"errors"
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

// verdict is the answer to a layered request as it is being built.
type verdict struct {
	// Decision is the request's decision as the client is told it: Allowed
	// when every layer admits; otherwise not, with RetryAfter the time at
	// which every layer would admit the request. Its other fields are the
	// binding layer's (see AllowLayers). Delay is the longest of the
	// layers'.
	Decision
	// binding is the index in the checks of the binding layer.
	binding int
	// ds holds every layer's decision, one per check, in the checks'
	// order.
	ds []Decision
	// took is the time the store decided at, when it decided in process.
	took time.Time
}

// one is the request and decision of a store call of one request.
type one struct {
	req [1]Request
	d   [1]Decision
}

// onePool holds the buffers of takeOne: a slice handed to a Store, an
// interface, escapes to the heap.
var onePool = sync.Pool{New: func() any { return new(one) }}

// takeOne asks s to Take req alone.
func takeOne(s Store, ctx context.Context, at time.Time, req *Request) (Decision, time.Time, error) {
	b := onePool.Get().(*one)
	b.req[0] = *req
	took, err := s.Take(ctx, at, b.req[:], b.d[:])
	d := b.d[0]
	*b = one{} // drop the key, the policy, the error
	onePool.Put(b)
	return d, took, err
}

// reqPool holds the arrays of requests a layered decision hands its store.
var reqPool = sync.Pool{New: func() any { return new([limits.MaxLayers]Request) }}

// decisionPool holds the arrays of decisions that a layered decision has
// the store fill when the caller gives none: the array reaches the store
// through an interface (Store.Take), so escape analysis would move one
// on the stack to the heap, 2 KB per call.
var decisionPool = sync.Pool{New: func() any { return new([limits.MaxLayers]Decision) }}

// AllowLayers decides a request made of checks, one per layer that applies
// (at most one per layer), at now as AllowN does, fills out[i] with the
// decision of checks[i] when out is not nil (it must then be at least as
// long as checks), and returns the request's decision and, when the store
// decided in process, the time it decided at (a caller writing an absolute
// time such as X-RateLimit-Reset need not read the clock again; the zero
// Time otherwise).
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
// why. Store failures, the
// caller's cancellation and shadow mode are as for AllowN.
func (l *Limiter) AllowLayers(ctx context.Context, now time.Time, checks []Check, out []Decision) (d Decision, at time.Time, err error) {
	if out != nil && len(out) < len(checks) {
		return Decision{}, time.Time{}, fmt.Errorf("%w: AllowLayers: %d decisions for %d checks", ErrInvalidOption, len(out), len(checks))
	}
	if len(checks) == 0 {
		return Decision{Allowed: true, Source: SourceStore}, time.Time{}, nil
	}
	if len(l.policies) == 1 && len(checks) == 1 && checks[0].Layer == 0 {
		// One check on a Limiter of one layer: AllowN, and the time the
		// store decided at when it asked the store itself. The direct
		// path repeats allow's, into the results, rather than calling a
		// helper: each return of a Decision is a copy (a shared helper
		// cost the single limit's decision 450 to 563 instructions a
		// call, callgrind).
		c := &checks[0]
		direct := false
		if l.direct || l.untouched != nil && l.untouched(c.Key) {
			req := Request{Key: c.Key, Policy: l.policy, Cost: c.Cost} // before plain, as in allow
			if direct = l.plain(ctx, c.Key, c.Cost); direct {
				if d, at, err = takeOne(l.store, ctx, now, &req); err != nil {
					d, err = l.storeFailed(ctx, req, now, &l.brk, err)
					at = time.Time{}
				} else {
					d.Policy = l.policy
					if d.Source != SourceStore {
						d.Source = SourceStore
					}
				}
			}
		}
		if !direct {
			d, err = l.allow(ctx, c.Key, c.Cost, now)
		}
		if out != nil {
			out[0] = d
		}
		return d, at, err
	}
	var v verdict
	var ds *[limits.MaxLayers]Decision
	if out != nil {
		v.ds = out[:0]
	} else {
		ds = decisionPool.Get().(*[limits.MaxLayers]Decision)
		v.ds = ds[:0]
	}
	err = l.allowLayers(ctx, checks, now, &v)
	if ds != nil {
		clear(ds[:]) // drop the policies and errors
		decisionPool.Put(ds)
	}
	return v.Decision, v.took, err
}

// allowEvery is AllowN on a layered Limiter: key and cost under every layer.
func (l *Limiter) allowEvery(ctx context.Context, key string, n int64, at time.Time) (Decision, error) {
	var checks [limits.MaxLayers]Check
	for i := range l.policies {
		checks[i] = Check{Layer: i, Key: key, Cost: n}
	}
	ds := decisionPool.Get().(*[limits.MaxLayers]Decision)
	v := verdict{ds: ds[:0]}
	err := l.allowLayers(ctx, checks[:len(l.policies)], at, &v)
	clear(ds[:len(l.policies)]) // drop the policies
	decisionPool.Put(ds)
	return v.Decision, err
}

func (l *Limiter) allowLayers(ctx context.Context, checks []Check, at time.Time, v *verdict) error {
	v.binding = 0
	if len(checks) > len(l.policies) {
		return fmt.Errorf("%w: AllowLayers: %d checks for %d layers", ErrInvalidOption, len(checks), len(l.policies))
	}
	arr := reqPool.Get().(*[limits.MaxLayers]Request)
	defer func() {
		clear(arr[:len(checks)]) // drop the keys and policies
		reqPool.Put(arr)
	}()
	reqs := arr[:len(checks)]
	var seen, over uint32 // over: the checks whose cost exceeds their policy's capacity
	var policyErr error
	for i := range checks {
		c := &checks[i]
		lp, err := l.layerOf("AllowLayers", i, c, &seen)
		if err != nil {
			return err
		}
		key, err := normalizeKey(c.Key)
		if err != nil {
			return fmt.Errorf("layer %q: %w", lp.Name, err)
		}
		r := &reqs[i] // built in place: a Request is large
		r.Key, r.Cost = key, c.Cost
		capacity, configured := l.caps[c.Layer], l.caps[c.Layer]
		if l.sources == nil {
			r.Policy = *lp
		} else {
			p, ceiling, err := l.adjust(ctx, c.Key, *lp)
			if err != nil {
				if policyErr == nil {
					policyErr = err
				}
				p = *lp
			}
			r.Policy, capacity, configured = p, p.capacity(), max(configured, ceiling)
		}
		if c.Cost < 1 {
			return fmt.Errorf("%w: layer %q: cost %d is not positive", ErrInvalidOption, lp.Name, c.Cost)
		}
		if c.Cost > capacity {
			// Within a policy configured for the request (the layer's, or
			// a plan's before another source shrank it), the request is
			// too costly for the policy in force: a denial. Beyond every
			// one, the cost is the caller's mistake.
			if c.Cost > configured {
				return fmt.Errorf("%w: layer %q: cost %d, capacity %d", ErrInvalidOption, lp.Name, c.Cost, capacity)
			}
			over |= 1 << i
		}
	}
	var w *watch
	var wv watch
	if l.observers != nil {
		w = &wv
	}
	var err error
	switch {
	case policyErr != nil:
		l.failLayers(reqs, v, policyErr)
	case over != 0:
		l.overLayers(reqs, over, v)
	default:
		err = l.decideLayers(ctx, reqs, at, w, v)
	}
	if l.shadow && !v.Allowed && err == nil {
		// Every layer that would have denied is shadowed, not only the
		// binding one: each is what the caller's out and the observers
		// hear of that layer.
		shade(&v.Decision, nil)
		for i := range v.ds {
			if !v.ds[i].Allowed {
				shade(&v.ds[i], nil)
			}
		}
	}
	if l.observers != nil {
		l.observeLayers(reqs, &wv, v, err)
	}
	return err
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

// decideLayers asks the store about reqs, all or nothing, and fills v.
func (l *Limiter) decideLayers(ctx context.Context, reqs []Request, at time.Time, w *watch, v *verdict) error {
	if ctx.Err() != nil {
		return l.canceledLayers(ctx, nil, reqs, v)
	}
	v.ds = growDecisions(v.ds, len(reqs))
	var bs breakers // of the partitions reqs touch: the Limiter's one, unless the store is Partitioned
	if l.parts == nil {
		bs.add(&l.brk)
	} else {
		for i := range reqs {
			bs.add(l.parts.of(reqs[i].Key, at))
		}
	}
	var state uint64
	for _, b := range bs.list() {
		state |= b.state.Load()
	}
	var probes uint32 // the breakers of bs this request probes
	if state&brkOpen != 0 {
		var ok bool
		if probes, ok = l.tryProbes(&bs, at); !ok {
			l.layersWithoutStore(ctx, reqs, at, v, l.openErr)
			return nil
		}
	}
	var start time.Time
	if w != nil && !l.inProcess.Load() {
		start = time.Now()
	}
	took, err := l.doAll(ctx, reqs, at, v.ds, &bs, probes)
	if !start.IsZero() {
		if inProcess(took) {
			l.inProcess.Store(true) // in process: timed no more
		} else {
			w.latency = time.Since(start)
		}
	}
	if err != nil {
		if callerDone(ctx) {
			return l.canceledLayers(ctx, err, reqs, v)
		}
		if !errors.Is(err, ErrInvalidOption) {
			l.failedOn(&bs, probes, err, l.elapsed(at))
		}
		l.layersWithoutStore(ctx, reqs, at, v, storeErr(err))
		return nil
	}
	if state&brkCount != 0 {
		for _, b := range bs.list() {
			if b.state.Load()&brkCount != 0 {
				b.succeed()
			}
		}
	}
	v.took = took
	l.verdict(reqs, v, SourceStore, nil)
	if l.fallback != nil && v.Allowed {
		l.mirrorLayers(ctx, reqs, at, v)
	}
	return nil
}

// growDecisions returns ds with length n, reusing its array when it can.
func growDecisions(ds []Decision, n int) []Decision {
	if cap(ds) < n {
		return make([]Decision, n)
	}
	ds = ds[:n]
	clear(ds)
	return ds
}

// verdict completes v from the decisions of reqs in v.ds: the policies,
// the Source and Err, the costs given back, the binding layer.
func (l *Limiter) verdict(reqs []Request, v *verdict, src Source, err error) {
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

// doAll asks the store to decide reqs, as do asks one request; probes
// are the breakers of bs whose probe it is.
func (l *Limiter) doAll(ctx context.Context, reqs []Request, at time.Time, out []Decision, bs *breakers, probes uint32) (time.Time, error) {
	took, err := l.store.Take(ctx, at, reqs, out)
	for i, b := range bs.list() {
		if probes&(1<<i) != 0 {
			l.probed(b, err == nil, at)
		}
	}
	return took, err
}

// tryProbes returns the open breakers of bs that the request at at is to
// probe (bits of bs), and whether it may ask the store: not when one of
// its open breakers has no probe due (it then gives up the probes it won).
func (l *Limiter) tryProbes(bs *breakers, at time.Time) (uint32, bool) {
	now := l.elapsed(at)
	var probes uint32
	for i, b := range bs.list() {
		if b.state.Load()&brkOpen == 0 {
			continue
		}
		if !b.tryProbe(now) {
			for j, c := range bs.list() {
				if probes&(1<<j) != 0 {
					c.probed(false, now)
				}
			}
			return 0, false
		}
		probes |= 1 << i
	}
	return probes, true
}

// layersWithoutStore decides reqs by the fallback or else the layers'
// FailClosed, for a store that failed with err or was not asked.
func (l *Limiter) layersWithoutStore(ctx context.Context, reqs []Request, at time.Time, v *verdict, err error) {
	if fb := l.fallback; fb != nil {
		l.brk.degrade(l.elapsed(at))
		clear(v.ds)
		if _, ferr := fb.Take(ctx, at, reqs, v.ds); ferr == nil {
			l.verdict(reqs, v, SourceFallback, err)
			return
		}
	}
	l.failLayers(reqs, v, err)
}

// failLayers fills v with the decisions of reqs by each layer's
// FailClosed, err their Err.
func (l *Limiter) failLayers(reqs []Request, v *verdict, err error) {
	v.ds = growDecisions(v.ds, len(reqs))
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
	v.ds = growDecisions(v.ds, len(reqs))
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
	v.Remaining = 0
}

// mirrorLayers takes reqs, which the store admitted, in the fallback too,
// as mirror does for one request.
func (l *Limiter) mirrorLayers(ctx context.Context, reqs []Request, at time.Time, v *verdict) {
	// From the pools: arrays handed to the fallback's Take, an
	// interface call, would each go to the heap.
	own := reqPool.Get().(*[limits.MaxLayers]Request)
	fds := decisionPool.Get().(*[limits.MaxLayers]Decision)
	n := copy(own[:], reqs)
	defer func() {
		clear(own[:n]) // drop the keys and policies
		clear(fds[:n])
		reqPool.Put(own)
		decisionPool.Put(fds)
	}()
	for i := range own[:n] {
		own[i].Policy.Lockout, own[i].Policy.LockoutMax, own[i].Policy.LockoutMemory = 0, 0, 0
	}
	_, err := l.fallback.Take(ctx, at, own[:n], fds[:n])
	if err != nil || l.brk.state.Load()&brkDegraded == 0 || !l.brk.degraded(l.elapsed(at)) {
		return
	}
	fv := verdict{ds: fds[:n]}
	l.verdict(reqs, &fv, SourceFallback, nil)
	if !fv.Allowed {
		copy(v.ds, fv.ds)
		v.Decision, v.binding = fv.Decision, fv.binding
	}
}

// canceledLayers is canceled for a layered request.
func (l *Limiter) canceledLayers(ctx context.Context, storeErr error, reqs []Request, v *verdict) error {
	d, err := l.canceled(ctx, &reqs[0].Policy, storeErr)
	v.Decision, v.binding = d, 0
	return err
}

// observeLayers reports a layered request: one Event per layer that
// applied, the binding layer's with the request's decision, the others'
// with their own; a request that decided nothing (err) is reported once,
// under its first layer.
func (l *Limiter) observeLayers(reqs []Request, p *watch, v *verdict, err error) {
	if err != nil || len(v.ds) < len(reqs) {
		p.key = reqs[v.binding].Key
		l.observeAs(reqs[v.binding].Cost, p, &v.Decision, err, true)
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
