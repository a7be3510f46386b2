package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// The one decision sequence. Allow, AllowN and AllowLayers each gather
// the request's parts into a call, one Request per layer it checks (1 to
// 16), in layer order, and it runs, top to bottom:
//
//	requests    the requests made ready: keys as the store sees them, costs, policies in force
//	fail mode   a PolicySource that failed decides by the layers' FailClosed
//	over        a cost beyond the policy in force is a denial, the store not asked
//	ask         the caller gone, the deny cache, the circuit breakers, the store
//	            (or, when it fails, the fallback or FailClosed), the mirror
//	verdict     the layers' decisions made the request's
//	shadow      a denial admitted, marked Shadowed
//	observers   one Event per layer
//
// One request is the common case, and is made cheap within this sequence
// rather than by a copy of it: its working memory comes from a pool (the
// requests and decisions reach the Store, an interface, so they would
// escape to the heap from the stack), and each step has a branch for one
// request where it would otherwise loop.

// call is the working memory of one decision, peek or refund: its
// requests as the store sees them, in layer order. Between calls it holds
// no key or error, and its decisions are zero (see release).
type call struct {
	reqs   [limits.MaxLayers]Request
	layers [limits.MaxLayers]uint8    // layers[j] is the layer of reqs[j]
	ds     [limits.MaxLayers]Decision // the layers' decisions, unless the caller's out holds them
	n      int                        // the requests in reqs
	bs     breakers                   // of the partitions the requests touch
	g      guard
	v      verdict
	w      watch
}

// callPool holds calls: one Get and one Put a call to the Limiter.
var callPool = sync.Pool{New: func() any { return new(call) }}

// gather fills c with the parts of in that check a layer (a Key), in layer
// order, in[i] being layer i's, and returns how many there are.
func (c *call) gather(in []Request) int {
	n := 0
	for i := range in {
		if in[i].Key == "" {
			continue
		}
		r := &c.reqs[n]
		r.Key, r.Cost = in[i].Key, in[i].Cost
		c.layers[n] = uint8(i)
		n++
	}
	c.n = n
	return n
}

// scatter copies the decisions of c's requests to out, in[i]'s to out[i],
// and zeroes out's other entries (len(out) >= len(in)).
func (c *call) scatter(in []Request, out []Decision) {
	clear(out[:len(in)])
	for j := range c.n {
		out[c.layers[j]] = c.ds[j]
	}
}

// release gives c back to callPool. It clears only what may hold a key or
// an error (a Decision is cleared whole: the deny cache fills a zero one),
// so that one request's decision does not pay to zero the whole call.
func (c *call) release() {
	n := c.n
	own := len(c.v.ds) == 0 || &c.v.ds[0] == &c.ds[0]
	for j := range n {
		c.reqs[j].Key = ""
		if own {
			c.ds[j] = Decision{} // inline stores, where clear calls memclrHasPointers
		}
	}
	if n > 1 {
		c.v.Decision = Decision{}
	}
	c.n, c.bs.n = 0, 0
	if c.g.on {
		c.g = guard{}
	}
	c.v.ds, c.v.took, c.v.binding, c.w = nil, time.Time{}, 0, watch{}
	callPool.Put(c)
}

// verdict is the answer to a request as it is being built.
type verdict struct {
	// Decision is the request's decision as the client is told it (see
	// AllowLayers); for one request, ds[0] is it (see result).
	Decision
	// binding is the index in the requests of the binding layer's.
	binding int
	// ds holds every layer's decision, one per request, in their order:
	// the caller's out, or the call's own.
	ds []Decision
	// took is the time the store decided at, when it decided.
	took time.Time
}

// result is the request's decision: ds[0] for one request, whose verdict
// is its one layer's, which decide does not copy.
func (v *verdict) result() *Decision {
	if len(v.ds) == 1 {
		return &v.ds[0]
	}
	return &v.Decision
}

// copyTo copies v's result to *d field by field: the store and the
// sequence have just written it field by field, and a load wider than
// the stores it reads from waits for them (a store-forwarding stall). So
// the copy of the whole by 16-byte moves took a tenth of a decision, and
// the four one-byte fields, read as one word, a fifth (CPU profiles of
// BenchmarkLimiterPaths/healthy): they are read one by one, apart.
func (v *verdict) copyTo(d *Decision) {
	s := v.result()
	d.Allowed = s.Allowed
	d.Limit = s.Limit
	d.Source = s.Source
	d.Remaining = s.Remaining
	d.LockedOut = s.LockedOut
	d.ResetAfter = s.ResetAfter
	d.Shadowed = s.Shadowed
	d.RetryAfter, d.Delay = s.RetryAfter, s.Delay
	d.Policy = s.Policy
	d.Err = s.Err
}

// decide runs the decision sequence for c's requests at at (zero: the
// store's clock), filling out (len(out) == c.n, in the requests' order)
// when it is not nil, and leaves the request's decision in c.v.result()
// and the time the store decided at, if it did, in c.v.took. It returns
// an error only for bad input or a caller gone first, with c.v.result()
// the decision observers heard.
func (l *Limiter) decide(ctx context.Context, at time.Time, c *call, out []Decision) error {
	n := c.n
	v := &c.v
	if out != nil {
		v.ds = out[:n]
		clear(v.ds)
	} else {
		v.ds = c.ds[:n]
	}
	reqs := c.reqs[:n]
	// The requests made ready for the store: each key as the store sees
	// it (see normalizeKey), each policy in force for the key (as the
	// PolicySources adjust it); over, bits of reqs, the requests whose
	// cost exceeds the policy in force but not a policy configured for
	// the request; the first PolicySource failure; or bad input: an
	// empty key, a cost below 1 or above every policy configured for the
	// request. What is rare (a source, a key to hash, bad input) is out
	// of line, and the step is here rather than a call of its own: the
	// fewer calls, the fewer values saved and reloaded around them.
	var over uint32
	var policyErr, err error
	for j := range reqs {
		r := &reqs[j]
		i := c.layers[j]
		if r.Cost < 1 || r.Key == "" {
			err = l.refused(r, i)
			break
		}
		capacity, configured := l.caps[i], l.caps[i]
		if l.sources == nil {
			r.Policy = l.policies[i]
		} else if capacity, configured, err = l.sourced(ctx, r, i); err != nil {
			if policyErr == nil {
				policyErr = err
			}
			err = nil
		}
		if len(r.Key) > limits.MaxKeyLen || !plainKey(r.Key) {
			r.Key = hashKey(r.Key)
		}
		if r.Cost > capacity {
			// Within a policy configured for the request (the layer's, or
			// a plan's before another source shrank it), the request is
			// too costly for the policy in force: a denial. Beyond every
			// one, the cost is the caller's mistake.
			if r.Cost > configured {
				err = fmt.Errorf("%w: layer %q: cost %d, capacity %d", ErrInvalidOption, l.policies[i].Name, r.Cost, capacity)
				break
			}
			over |= 1 << j
		}
	}
	var w *watch
	if l.observers != nil {
		w = &c.w
	}
	switch {
	case err != nil:
		l.badInput(c, v)
	case policyErr != nil:
		l.failLayers(reqs, v, policyErr)
	case over != 0:
		l.overLayers(reqs, over, v)
	default:
		err = l.ask(ctx, at, c, reqs, w)
	}
	d := v.result()
	if l.shadow && !d.Allowed && err == nil {
		// Every layer that would have denied is shadowed, not only the
		// binding one: each is what the caller's out and the observers
		// hear of that layer.
		for i := range v.ds {
			shade(&v.ds[i])
		}
		shade(d)
	}
	if w != nil {
		l.observeLayers(reqs, w, v, err)
	}
	if d.Source != SourceStore || err != nil {
		v.took = time.Time{} // nothing the store took, to refund
	}
	return err
}

// shade admits *d, a denial, in shadow mode.
func shade(d *Decision) {
	if !d.Allowed {
		d.Allowed, d.Shadowed = true, true
	}
}

// refused is the error of r, a request of layer i with a cost below 1 or
// an empty key; r is left without a key (see Event.Key).
func (l *Limiter) refused(r *Request, i uint8) error {
	name := l.policies[i].Name
	if r.Cost >= 1 {
		return fmt.Errorf("layer %q: %w: empty key", name, ErrInvalidOption)
	}
	r.Key = "" // refused before the key is looked at
	return fmt.Errorf("%w: layer %q: cost %d is not positive", ErrInvalidOption, name, r.Cost)
}

// sourced sets r's policy to layer i's as the PolicySources adjust it for
// r's key (the layer's own when they fail, with their error), and returns
// its capacity and the capacity of the largest policy configured for the
// request (see adjust).
func (l *Limiter) sourced(ctx context.Context, r *Request, i uint8) (capacity, configured int64, err error) {
	lp := &l.policies[i]
	p, ceiling, err := l.adjust(ctx, r.Key, *lp)
	if err != nil {
		r.Policy = *lp
		return l.caps[i], l.caps[i], err
	}
	r.Policy = p
	return p.capacity(), max(l.caps[i], ceiling), nil
}

// badInput leaves in v the decision of c's request, refused for bad
// input: its first layer's policy and capacity, nothing decided.
func (l *Limiter) badInput(c *call, v *verdict) {
	p := &l.policies[c.layers[0]]
	d := v.result()
	*d = Decision{Limit: p.capacity(), Policy: *p}
	v.binding = 0
}

// ask decides reqs by the store, into c.v, unless the caller is gone, the
// deny cache knows the answer or the circuit breaker is open: then by the
// fallback or the policies' FailClosed. w, when not nil, records the
// store's latency. What guards the store call (the deny cache, the
// breakers and their probes, the timer) is out of line, in c.g, entered
// only when the Limiter has one of them or its breaker is not closed: the
// hot path keeps few values live across the store call.
func (l *Limiter) ask(ctx context.Context, at time.Time, c *call, reqs []Request, w *watch) error {
	v := &c.v
	if ctx.Err() != nil {
		return l.canceledLayers(ctx, nil, reqs, v)
	}
	g := &c.g
	if l.denied != nil || l.parts != nil || w != nil || l.brk.state.Load() != 0 {
		if done := l.before(ctx, at, c, reqs, w); done {
			return nil
		}
	}
	took, err := l.store.Take(ctx, at, reqs, v.ds)
	if g.on {
		l.after(c, took, err, at, w)
	}
	if err != nil {
		bs := &c.bs
		if bs.n == 0 {
			l.breakersOf(bs, reqs, at)
		}
		return l.storeFailed(ctx, reqs, at, v, bs, g.probes, err)
	}
	v.took = took
	if len(reqs) == 1 { // verdict of one request, inline
		d := &v.ds[0]
		d.Policy, d.Source, d.Err = reqs[0].Policy, SourceStore, nil
		v.binding = 0
	} else {
		l.verdict(reqs, v, SourceStore, nil)
	}
	if l.fallback != nil && v.result().Allowed {
		l.mirror(ctx, reqs, at, v)
	}
	if l.denied != nil && !v.ds[0].Allowed {
		l.denied.put(reqs[0].Key, reqs[0].Cost, g.now, v.ds[0], g.gen)
	}
	return nil
}

// guard is what ask keeps across the store call for the deny cache, the
// breakers and the timer (see before).
type guard struct {
	on     bool      // before ran: after must
	now    time.Time // the deny cache's clock, read before the store decides
	gen    uint64    // the deny cache's generation, likewise
	state  uint64    // the breakers' state, or'ed
	probes uint32    // the breakers of c.bs this request probes
	start  time.Time // when the store was asked, when it is timed
}

// before is ask's part before the store call, for a Limiter with a deny
// cache, a Partitioned store, observers (the timer) or a breaker that is
// not closed: it fills c.g, and reports whether the request was decided
// without the store (the deny cache, or an open breaker with no probe
// due).
func (l *Limiter) before(ctx context.Context, at time.Time, c *call, reqs []Request, w *watch) bool {
	v, g := &c.v, &c.g
	g.on = true
	if l.denied != nil {
		// A Limiter of one layer: one request.
		if g.now = at; g.now.IsZero() {
			g.now = time.Now()
		}
		d, r := &v.ds[0], &reqs[0]
		if l.denied.get(r.Key, r.Cost, g.now, &r.Policy, d) {
			d.Limit, d.Policy = r.Policy.capacity(), r.Policy
			return true
		}
		g.gen = l.denied.generation()
	}
	// The breakers of the partitions reqs touch: the Limiter's one, unless
	// the store is Partitioned.
	bs := &c.bs
	g.state = l.brk.state.Load()
	if l.parts != nil || g.state != 0 {
		l.breakersOf(bs, reqs, at)
		for _, b := range bs.list() {
			g.state |= b.state.Load()
		}
	}
	if g.state&brkOpen != 0 {
		var ok bool
		if g.probes, ok = l.tryProbes(bs, at); !ok {
			l.withoutStore(ctx, reqs, at, v, l.openErr)
			return true
		}
	}
	if w != nil && !l.inProcess.Load() {
		g.start = time.Now()
	}
	return false
}

// after is ask's part after the store call that returned took and err,
// when before ran: the probes' outcome, the store's latency, a success
// counted by the breakers.
func (l *Limiter) after(c *call, took time.Time, err error, at time.Time, w *watch) {
	g, bs := &c.g, &c.bs
	if g.probes != 0 {
		for i, b := range bs.list() {
			if g.probes&(1<<i) != 0 {
				l.probed(b, err == nil, at)
			}
		}
	}
	if !g.start.IsZero() {
		if inProcess(took) {
			l.inProcess.Store(true) // in process: it never waits, and is timed no more
		} else {
			w.latency = time.Since(g.start)
		}
	}
	if err == nil && g.state&brkCount != 0 {
		for _, b := range bs.list() {
			if b.state.Load()&brkCount != 0 {
				b.succeed()
			}
		}
	}
}

// breakersOf fills bs with the breakers of the partitions reqs touch: the
// Limiter's own, unless the store is Partitioned.
func (l *Limiter) breakersOf(bs *breakers, reqs []Request, at time.Time) {
	bs.n = 0
	if l.parts == nil {
		bs.add(&l.brk)
		return
	}
	for i := range reqs {
		bs.add(l.parts.of(reqs[i].Key, at))
	}
}

// inProcess reports whether took, a time a store returned, was read from
// this process's clock (it carries a monotonic reading): the store decided
// in process (see Store.Take). A store that decides elsewhere returns its
// own clock's time, or none.
func inProcess(took time.Time) bool { return took != took.Round(0) }

// storeFailed decides reqs, which the store failed with err: the caller's
// error when the caller has left meanwhile, else the fallback's or
// FailClosed's decision, Err set. The failure counts toward opening the
// breakers of bs but for those it probed (the probe reports itself), and
// but for bad input, which says nothing of the store's health.
func (l *Limiter) storeFailed(ctx context.Context, reqs []Request, at time.Time, v *verdict, bs *breakers, probes uint32, err error) error {
	if callerDone(ctx) {
		return l.canceledLayers(ctx, err, reqs, v)
	}
	if !errors.Is(err, ErrInvalidOption) {
		l.failedOn(bs, probes, err, l.elapsed(at))
	}
	l.withoutStore(ctx, reqs, at, v, storeErr(err))
	return nil
}

// storeErr is the Decision.Err of a store failure err.
func storeErr(err error) error { return fmt.Errorf("%w: %w", limits.ErrStore, err) }

// withoutStore decides reqs by the fallback or else the layers'
// FailClosed, for a store that failed with err or was not asked.
func (l *Limiter) withoutStore(ctx context.Context, reqs []Request, at time.Time, v *verdict, err error) {
	if fb := l.fallback; fb != nil {
		// Before the fallback's Take, so that a concurrent mirror that
		// the fallback refuses sees the degraded period (see mirror).
		l.brk.degrade(l.elapsed(at))
		clear(v.ds)
		if _, ferr := fb.Take(ctx, at, reqs, v.ds); ferr == nil {
			l.verdict(reqs, v, SourceFallback, err)
			return
		}
	}
	l.failLayers(reqs, v, err)
}

// mirror takes reqs, which the store admitted, in the fallback too. While
// the Limiter is Recovering, the fallback's refusal refuses the request;
// otherwise it is ignored (the fallback's view is already full). The
// state is read after the fallback's Take: a decision without the store
// marks the degraded period before its own Take, so that either this
// mirror sees it, or that decision sees this mirror.
func (l *Limiter) mirror(ctx context.Context, reqs []Request, at time.Time, v *verdict) {
	m := callPool.Get().(*call)
	n := copy(m.reqs[:], reqs)
	m.n = n
	defer m.release()
	for i := range m.reqs[:n] {
		// The fallback counts what the store admitted; it strikes no one
		// for it (its lockouts are its own, when it decides alone).
		p := &m.reqs[i].Policy
		p.Lockout, p.LockoutMax, p.LockoutMemory = 0, 0, 0
	}
	fv := &m.v
	fv.ds = m.ds[:n]
	_, err := l.fallback.Take(ctx, at, m.reqs[:n], fv.ds)
	if err != nil || l.brk.state.Load()&brkDegraded == 0 || !l.brk.degraded(l.elapsed(at)) {
		return
	}
	l.verdict(reqs, fv, SourceFallback, nil)
	if fd := fv.result(); !fd.Allowed {
		copy(v.ds, fv.ds)
		v.Decision, v.binding = *fd, fv.binding
		return
	}
	if n == 1 { // both admitted: the tighter of the two
		d, fd := &v.ds[0], &fv.ds[0]
		d.Remaining = min(d.Remaining, fd.Remaining)
		d.ResetAfter = max(d.ResetAfter, fd.ResetAfter)
		d.Delay = max(d.Delay, fd.Delay)
	}
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

// canceledLayers is the answer to a caller whose ctx has ended, under the
// first layer's policy (see canceled).
func (l *Limiter) canceledLayers(ctx context.Context, storeErr error, reqs []Request, v *verdict) error {
	d, err := l.canceled(ctx, &reqs[0].Policy, storeErr)
	*v.result() = d
	v.binding = 0
	return err
}
