package core

import (
	"context"
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
//	leases      a leased layer's request decided from a grant held in process
//	            (see lease.go), the others going on to ask
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
	case l.leasedBits != 0:
		err = l.leases(ctx, at, c, reqs, w)
	default:
		err = l.ask(ctx, at, c, reqs, w)
	}
	d := v.result()
	if l.shadow && !d.Allowed && err == nil {
		shadeAll(v.ds, d)
	}
	if w != nil {
		l.observeLayers(reqs, w, v, err)
	}
	if d.Source != SourceStore && d.Source != SourceLease || err != nil {
		v.took = time.Time{} // nothing the store took, to refund
	}
	return err
}

// shadeAll admits, in shadow mode, every layer of ds that would have
// denied, not only the binding one (each is what the caller's out and the
// observers hear of that layer), and the request's decision d.
func shadeAll(ds []Decision, d *Decision) {
	for i := range ds {
		shade(&ds[i])
	}
	shade(d)
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
	ceiling, err := l.adjust(ctx, r.Key, lp, &r.Policy)
	if err != nil {
		r.Policy = *lp
		return l.caps[i], l.caps[i], err
	}
	return r.Policy.capacity(), max(l.caps[i], ceiling), nil
}

// badInput leaves in v the decision of c's request, refused for bad
// input: its first layer's policy and capacity, nothing decided.
func (l *Limiter) badInput(c *call, v *verdict) {
	p := &l.policies[c.layers[0]]
	d := v.result()
	*d = Decision{Limit: p.capacity(), Policy: *p}
	v.binding = 0
}
