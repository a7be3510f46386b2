package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apigate/ratelimit/internal/limits"
)

// Layer is one named limit of a layered Limiter: the whole API, a user, an
// endpoint, an address. Its Name is the Name of every policy it decides
// by, in storage and in the RateLimit-Policy header, so that a client
// moved from one policy to another within the layer (a plan, an override)
// keeps its usage.
type Layer struct {
	// Name identifies the layer: unique within the Limiter whatever the
	// case, at most 64 characters of [A-Za-z0-9._-].
	Name string
	// Policy is the layer's policy, unless a request brings its own
	// (Check.Policy). Its Name must be empty or Name.
	Policy Policy
	// FailClosed makes the layer deny when the store fails, or is not
	// asked (an open circuit breaker), and no fallback store decides,
	// whatever the Limiter's FailMode: a login guard that must not open
	// during an outage, on a Limiter that fails open for the rest of the
	// API. A request is then admitted only when every layer that applies
	// fails open; its RetryAfter is the fail-closed retry
	// (WithFailClosedRetry).
	FailClosed bool
}

// Check is one layer's part of a request to a layered Limiter: the client
// key and cost under that layer, and optionally the policy chosen for this
// request. A layer that does not apply to the request has no Check.
type Check struct {
	// Layer is the index of the layer in Limiter.Layers().
	Layer int
	// Key identifies the client under this layer (see Limiter.Allow).
	Key string
	// Cost is the units the request takes from this layer, in [1, the
	// policy's Capacity].
	Cost int64
	// Policy, when not nil, is the policy chosen for this request (a
	// premium plan, a per-API-key quota) instead of the layer's. It must
	// have the layer's Algorithm; its Name is replaced by the layer's, so
	// that usage carries across plans. It is read during the call only.
	Policy *Policy
}

// Verdict is the answer to a layered request (Limiter.AllowLayers).
type Verdict struct {
	// Decision is the request's decision as the client is told it: Allowed
	// when every layer admits; otherwise not, with RetryAfter the time at
	// which every layer would admit the request. Its other fields are the
	// binding layer's: the one that denied (of several, the one whose
	// denial lasts longest), or, when all admit, the one closest to
	// denying (the least Remaining; of equals, the longest ResetAfter).
	// Delay is the longest of the layers'.
	Decision
	// Binding is the index in the Checks of the binding layer, -1 when
	// no layer applied (no Checks: the request passes untouched).
	Binding int
	// Decisions holds every layer's decision, one per Check, in the
	// Checks' order. A layer that admitted a request another layer denied
	// took nothing: its Decision is Allowed, and says what it has left.
	// AllowLayers reuses the slice's array across calls.
	Decisions []Decision
}

// layered is a layered Limiter's own state.
type layered struct {
	layers []Layer // validated, Names filled
	multi  Store
	// fallback is the fallback store, when the Limiter has one.
	fallback Store
	index    map[string]int          // layer name -> index
	capacity [limits.MaxLayers]int64 // each layer's Policy.capacity()
}

// reqPool holds the arrays of requests a layered decision hands its store.
var reqPool = sync.Pool{New: func() any { return new([limits.MaxLayers]Request) }}

// decisionPool holds the arrays of decisions that Allow and AllowN on a
// layered Limiter have the store fill: the array reaches the store through
// an interface (Store.TakeAll), so escape analysis would move one on
// the stack to the heap, 2 KB per call.
var decisionPool = sync.Pool{New: func() any { return new([limits.MaxLayers]Decision) }}

// NewLayered returns a Limiter that decides each request against several
// layers at once (AllowLayers): a request passes only when every layer
// that applies admits it, and one denied by any layer takes nothing from
// any. opts are NewLimiter's; WithDenyCache is not
// available to a layered Limiter.
//
// NewLayered fails with ErrInvalidPolicy when a layer's policy does not
// validate, and ErrInvalidOption for no layer, more than 16, a
// duplicate or invalid layer name (names that differ only in case are
// duplicates: a client reading the headers, an operator writing an
// override, would take one for the other), a policy whose Name is not its layer's,
// or a bad option.
//
// Allow, AllowN and Reset on a layered Limiter apply to every layer with
// the same key; Policy returns the first layer's policy.
func NewLayered(store Store, layers []Layer, opts ...Option) (*Limiter, error) {
	if len(layers) == 0 {
		return nil, fmt.Errorf("%w: NewLayered: no layer", ErrInvalidOption)
	}
	if len(layers) > limits.MaxLayers {
		return nil, fmt.Errorf("%w: NewLayered: %d layers, more than %d", ErrInvalidOption, len(layers), limits.MaxLayers)
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOption)
	}
	multi := store
	own := make([]Layer, len(layers))
	index := make(map[string]int, len(layers))
	for i, ly := range layers {
		if ly.Name == "" {
			return nil, fmt.Errorf("%w: NewLayered: layer %d has no name", ErrInvalidOption, i)
		}
		if err := (Policy{Name: ly.Name, Algorithm: FixedWindow, Limit: 1, Window: limits.MinWindow}).Validate(); err != nil {
			return nil, fmt.Errorf("%w: NewLayered: layer %d: %w", ErrInvalidOption, i, err)
		}
		if _, dup := index[ly.Name]; dup {
			return nil, fmt.Errorf("%w: NewLayered: two layers are named %q", ErrInvalidOption, ly.Name)
		}
		for other := range index {
			if strings.EqualFold(other, ly.Name) {
				return nil, fmt.Errorf("%w: NewLayered: layers %q and %q differ only in case", ErrInvalidOption, other, ly.Name)
			}
		}
		index[ly.Name] = i
		if ly.Policy.Name != "" && ly.Policy.Name != ly.Name {
			return nil, fmt.Errorf("%w: NewLayered: layer %q has a policy named %q: leave the policy's Name empty", ErrInvalidOption, ly.Name, ly.Policy.Name)
		}
		ly.Policy.Name = ly.Name
		if err := ly.Policy.Validate(); err != nil {
			return nil, fmt.Errorf("layer %q: %w", ly.Name, err)
		}
		own[i] = ly
	}
	return newLimiter(store, own[0].Policy, func(l *Limiter, _ config) (*layered, error) {
		if l.denied != nil {
			return nil, fmt.Errorf("%w: NewLayered: WithDenyCache applies to single-policy Limiters only", ErrInvalidOption)
		}
		ls := &layered{layers: own, multi: multi, index: index}
		for i := range own {
			ls.capacity[i] = own[i].Policy.capacity()
		}
		if l.fallback != nil {
			ls.fallback = l.fallback
			for _, ly := range own {
				l.brk.horizon = max(l.brk.horizon, int64(horizon(ly.Policy)))
			}
		}
		return ls, nil
	}, opts)
}

// Layers returns the layers of a layered Limiter (a copy), and nil for a
// Limiter built by NewLimiter.
func (l *Limiter) Layers() []Layer {
	if l.layered == nil {
		return nil
	}
	return append([]Layer(nil), l.layered.layers...)
}

// LayerIndex returns the index of the layer named name, and false when the
// Limiter has no such layer.
func (l *Limiter) LayerIndex(name string) (int, bool) {
	if l.layered == nil {
		return 0, false
	}
	i, ok := l.layered.index[name]
	return i, ok
}

// AllowLayers decides a request made of checks, one per layer that applies
// (at most one per layer), and fills v. The request is admitted only when
// every layer admits it; when any denies, no layer records it. A request
// with no check passes (v.Binding is -1), without a store call.
//
// A cost above the capacity of the policy in force, but within a policy
// configured for the request (the layer's own, or its Check.Policy before
// a PolicySource shrank it), is a denial, not an error: the request is
// denied without asking the store, takes nothing from any layer, and the
// layer's RetryAfter is its Window (see overLayers).
//
// Bad input (a layer index out of range or repeated, an empty key, a cost
// out of range, a Check.Policy that is invalid or of another algorithm)
// returns an error wrapping ErrInvalidOption, ErrInvalidKey,
// ErrInvalidCost, ErrCostExceedsLimit or ErrInvalidPolicy. An invalid
// Check.Policy, or a PolicySource's, is the caller's to have chosen per
// request: it is decided by the FailMode (v.Source is SourceFailMode), and
// the error wraps ErrInvalidPolicy. Store failures, the caller's
// cancellation and shadow mode are as for AllowN.
func (l *Limiter) AllowLayers(ctx context.Context, checks []Check, v *Verdict) error {
	return l.allowLayers(ctx, checks, time.Time{}, v)
}

// AllowLayersAt is AllowLayers at the time now, as AllowNAt is AllowN.
func (l *Limiter) AllowLayersAt(ctx context.Context, checks []Check, now time.Time, v *Verdict) error {
	return l.allowLayers(ctx, checks, now, v)
}

// allowEvery is Allow on a layered Limiter: key and cost under every layer.
func (l *Limiter) allowEvery(ctx context.Context, key string, n int64, at time.Time) (Decision, error) {
	var checks [limits.MaxLayers]Check
	for i := range l.layered.layers {
		checks[i] = Check{Layer: i, Key: key, Cost: n}
	}
	ds := decisionPool.Get().(*[limits.MaxLayers]Decision)
	v := Verdict{Decisions: ds[:0]}
	err := l.allowLayers(ctx, checks[:len(l.layered.layers)], at, &v)
	clear(ds[:len(l.layered.layers)]) // drop the policies
	decisionPool.Put(ds)
	return v.Decision, err
}

func (l *Limiter) allowLayers(ctx context.Context, checks []Check, at time.Time, v *Verdict) error {
	if v == nil {
		return fmt.Errorf("%w: AllowLayers: nil Verdict", ErrInvalidOption)
	}
	v.Decisions = v.Decisions[:0]
	v.Binding = -1
	ls := l.layered
	if ls == nil {
		return l.singleAsLayer(ctx, checks, at, v)
	}
	if len(checks) == 0 {
		v.Decision = Decision{Allowed: true, Source: SourceStore}
		return nil
	}
	if len(checks) > len(ls.layers) {
		return fmt.Errorf("%w: AllowLayers: %d checks for %d layers", ErrInvalidOption, len(checks), len(ls.layers))
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
		if c.Layer < 0 || c.Layer >= len(ls.layers) {
			return fmt.Errorf("%w: AllowLayers: check %d names layer %d of %d", ErrInvalidOption, i, c.Layer, len(ls.layers))
		}
		if seen&(1<<c.Layer) != 0 {
			return fmt.Errorf("%w: AllowLayers: two checks for layer %q", ErrInvalidOption, ls.layers[c.Layer].Name)
		}
		seen |= 1 << c.Layer
		key, err := normalizeKey(c.Key)
		if err != nil {
			return fmt.Errorf("layer %q: %w", ls.layers[c.Layer].Name, err)
		}
		ly := &ls.layers[c.Layer]
		r := &reqs[i] // built in place: a Request is 112 bytes
		r.Key, r.Cost = key, c.Cost
		capacity := ls.capacity[c.Layer]
		if c.Policy == nil && l.sources == nil {
			r.Policy = ly.Policy
		} else {
			p, err := l.resolve(ly, c.Policy)
			if err != nil {
				if policyErr == nil {
					policyErr = err
				}
				p = ly.Policy
			}
			r.Policy, capacity = p, p.capacity()
		}
		if c.Cost < 1 {
			return fmt.Errorf("%w: layer %q: cost %d is not positive", ErrInvalidCost, ly.Name, c.Cost)
		}
		if c.Cost > capacity {
			// Within a policy configured for the request (the layer's, or
			// the plan's before a policy source shrank it), the request is
			// too costly for the policy in force: a denial. Beyond every
			// one, the cost is the caller's mistake.
			configured := ls.capacity[c.Layer]
			if c.Policy != nil && policyErr == nil {
				configured = max(configured, c.Policy.capacity())
			}
			if c.Cost > configured {
				return fmt.Errorf("%w: layer %q: cost %d, capacity %d", ErrCostExceedsLimit, ly.Name, c.Cost, capacity)
			}
			over |= 1 << i
		}
	}
	if policyErr != nil {
		l.failLayers(reqs, v)
		return policyErr
	}
	if over != 0 {
		l.overLayers(reqs, over, v)
		if l.shadow {
			shade(&v.Decision, nil)
		}
		if l.observers != nil {
			var wv watch
			l.observeLayers(checks, reqs, &wv, v, nil)
		}
		return nil
	}
	var w *watch
	var wv watch
	if l.observers != nil {
		w = &wv
	}
	err := l.decideLayers(ctx, reqs, at, w, v)
	if l.shadow && !v.Allowed {
		shade(&v.Decision, err)
	}
	if l.observers != nil && v.Binding >= 0 {
		l.observeLayers(checks, reqs, &wv, v, err)
	}
	return err
}

// singleAsLayer is AllowLayers on a Limiter built by NewLimiter: its one
// policy is layer 0.
func (l *Limiter) singleAsLayer(ctx context.Context, checks []Check, at time.Time, v *Verdict) error {
	switch {
	case len(checks) == 0:
		v.Decision = Decision{Allowed: true, Source: SourceStore}
		return nil
	case len(checks) > 1 || checks[0].Layer != 0:
		return fmt.Errorf("%w: AllowLayers: a Limiter built by NewLimiter has one layer, 0", ErrInvalidOption)
	case checks[0].Policy != nil:
		return fmt.Errorf("%w: AllowLayers: a Limiter built by NewLimiter takes no per-request policy; use NewLayered", ErrInvalidOption)
	}
	d, err := l.allow(ctx, checks[0].Key, checks[0].Cost, at)
	v.Decision, v.Binding = d, 0
	v.Decisions = append(v.Decisions, d)
	return err
}

// resolve returns the policy a check decides by: the request's own, when
// it brings one, else the layer's, adjusted by the Limiter's policy
// sources.
func (l *Limiter) resolve(ly *Layer, own *Policy) (Policy, error) {
	p := ly.Policy
	if own != nil {
		p = *own
		if p.Algorithm != ly.Policy.Algorithm {
			return Policy{}, fmt.Errorf("%w: layer %q: the request's policy is %s, the layer's %s", ErrInvalidPolicy, ly.Name, p.Algorithm, ly.Policy.Algorithm)
		}
		p.Name = ly.Name
		if err := p.Validate(); err != nil {
			return Policy{}, fmt.Errorf("layer %q: the request's policy: %w", ly.Name, err)
		}
	}
	if l.sources == nil {
		return p, nil
	}
	return l.adjust(p)
}

// decideLayers asks the store about reqs, all or nothing, and fills v.
func (l *Limiter) decideLayers(ctx context.Context, reqs []Request, at time.Time, w *watch, v *Verdict) error {
	ls := l.layered
	if ctx.Err() != nil {
		return l.canceledLayers(ctx, nil, reqs, v)
	}
	v.Decisions = growDecisions(v.Decisions, len(reqs))
	state := l.brk.state.Load()
	probe := false
	if state&brkOpen != 0 {
		if probe = l.brk.tryProbe(l.elapsed(at)); !probe {
			return l.layersWithoutStore(ctx, reqs, at, v, l.openErr)
		}
	}
	var start time.Time
	if w != nil && !l.inProcess.Load() {
		start = time.Now()
	}
	took, err := l.doAll(ctx, ls.multi, reqs, at, v.Decisions, probe)
	if !start.IsZero() {
		if !took.IsZero() {
			l.inProcess.Store(true) // in process: timed no more
		} else {
			w.latency = time.Since(start)
		}
	}
	if err != nil {
		if callerDone(ctx) {
			return l.canceledLayers(ctx, err, reqs, v)
		}
		if !probe && countsAsFailure(err) {
			l.brk.fail(l.elapsed(at))
		}
		return l.layersWithoutStore(ctx, reqs, at, v, fmt.Errorf("%w: layers: %w", ErrStore, timedOut(err)))
	}
	if state&brkCount != 0 {
		l.brk.succeed()
	}
	l.verdict(reqs, v, SourceStore)
	if ls.fallback != nil && v.Allowed {
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

// verdict completes v from the store's decisions of reqs: the policies,
// the Source, the costs given back, the binding layer.
func (l *Limiter) verdict(reqs []Request, v *Verdict, src Source) {
	allowed := true
	for i := range v.Decisions {
		if !v.Decisions[i].Allowed {
			allowed = false
			break
		}
	}
	b := -1
	var delay time.Duration
	for i := range v.Decisions {
		d := &v.Decisions[i]
		d.Policy, d.Source = reqs[i].Policy, src
		if d.Allowed {
			delay = max(delay, d.Delay)
			if !allowed { // it took nothing: what it has left is its cost more
				d.Remaining = min(d.Remaining+reqs[i].Cost, d.Limit)
				d.Delay = 0
			}
		}
		if b < 0 || binds(d, &v.Decisions[b], allowed) {
			b = i
		}
	}
	v.Binding = b
	v.Decision = v.Decisions[b]
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

// doAll asks store to decide reqs, as do asks one request.
func (l *Limiter) doAll(ctx context.Context, store Store, reqs []Request, at time.Time, out []Decision, probe bool) (time.Time, error) {
	took, err := store.TakeAll(ctx, at, reqs, out)
	if probe {
		l.brk.probed(err == nil, l.elapsed(at))
	}
	return took, err
}

// layersWithoutStore decides reqs by the fallback or else the FailMode,
// for a store that failed with err or was not asked.
func (l *Limiter) layersWithoutStore(ctx context.Context, reqs []Request, at time.Time, v *Verdict, err error) error {
	if fb := l.layered.fallback; fb != nil {
		l.brk.degrade(l.elapsed(at))
		clear(v.Decisions)
		if _, ferr := fb.TakeAll(ctx, at, reqs, v.Decisions); ferr == nil {
			l.verdict(reqs, v, SourceFallback)
			return err
		}
	}
	l.failLayers(reqs, v)
	return err
}

// failLayers fills v with the FailMode's decisions of reqs: each layer's
// fails closed when the Limiter's FailMode or the layer says so.
func (l *Limiter) failLayers(reqs []Request, v *Verdict) {
	v.Decisions = growDecisions(v.Decisions, len(reqs))
	for i := range reqs {
		closed := l.failMode == FailClosed
		if j, ok := l.layered.index[reqs[i].Policy.Name]; ok && l.layered.layers[j].FailClosed {
			closed = true
		}
		v.Decisions[i] = l.failedAs(&reqs[i].Policy, closed)
	}
	l.verdict(reqs, v, SourceFailMode)
}

// overLayers fills v for reqs, some of which (the bits of over) cost more
// than their policy's capacity: a request that could not pass under the
// policies in force (a plan, or a policy source that shrank the limit),
// denied without asking the store, so that it takes nothing from any
// layer. Each such layer denies it with RetryAfter its Window, after which
// the policy in force may have changed. The store was not asked what the
// others have left: they say nothing left until their Window has passed,
// so that a client that heeds them is never surprised.
func (l *Limiter) overLayers(reqs []Request, over uint32, v *Verdict) {
	v.Decisions = growDecisions(v.Decisions, len(reqs))
	for i := range reqs {
		p := &reqs[i].Policy
		v.Decisions[i] = Decision{Allowed: over&(1<<i) == 0, Limit: p.capacity(), ResetAfter: p.Window}
		if !v.Decisions[i].Allowed {
			v.Decisions[i].RetryAfter = p.Window
		}
	}
	l.verdict(reqs, v, SourceStore)
	for i := range v.Decisions {
		v.Decisions[i].Remaining = 0 // not the cost back that verdict gives a layer that took nothing
	}
	v.Remaining = 0
}

// mirrorLayers takes reqs, which the store admitted, in the fallback too,
// as mirror does for one request.
func (l *Limiter) mirrorLayers(ctx context.Context, reqs []Request, at time.Time, v *Verdict) {
	// From the pools: arrays handed to the fallback's TakeAll, an
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
	_, err := l.layered.fallback.TakeAll(ctx, at, own[:n], fds[:n])
	if err != nil || l.brk.state.Load()&brkDegraded == 0 || !l.brk.degraded(l.elapsed(at)) {
		return
	}
	fv := Verdict{Decisions: fds[:n]}
	l.verdict(reqs, &fv, SourceFallback)
	if !fv.Allowed {
		copy(v.Decisions, fv.Decisions)
		v.Decision, v.Binding = fv.Decision, fv.Binding
	}
}

// canceledLayers is canceled for a layered request.
func (l *Limiter) canceledLayers(ctx context.Context, storeErr error, reqs []Request, v *Verdict) error {
	_, err := l.canceled(ctx, storeErr)
	p := &reqs[0].Policy
	v.Decision = Decision{Limit: p.capacity(), Policy: *p}
	v.Binding = 0
	return err
}

// failedAs is the Decision of a store failure under policy p: a denial
// when closed, else an admission.
func (l *Limiter) failedAs(p *Policy, closed bool) Decision {
	c := p.capacity()
	if closed {
		return Decision{Limit: c, ResetAfter: l.failRetry, RetryAfter: l.failRetry, Policy: *p, Source: SourceFailMode}
	}
	return Decision{Allowed: true, Limit: c, Remaining: c, Policy: *p, Source: SourceFailMode}
}

// resetEvery is Reset on a layered Limiter: key under every layer.
func (l *Limiter) resetEvery(ctx context.Context, key string) error {
	var errs []error
	for _, ly := range l.layered.layers {
		if err := l.resetPolicy(ctx, key, ly.Policy); err != nil {
			if errors.Is(err, ErrCanceled) || errors.Is(err, ErrInvalidKey) {
				return err
			}
			errs = append(errs, fmt.Errorf("layer %q: %w", ly.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ResetLayer forgets the state of key under the layer named layer, its
// lockout and strikes included, as Reset does for a Limiter's policy. It
// fails with ErrInvalidOption when the Limiter has no such layer.
func (l *Limiter) ResetLayer(ctx context.Context, layer, key string) error {
	i, ok := l.LayerIndex(layer)
	if !ok {
		if l.layered == nil && layer == l.policy.Name {
			return l.Reset(ctx, key)
		}
		return fmt.Errorf("%w: ResetLayer: no layer %q", ErrInvalidOption, layer)
	}
	return l.resetPolicy(ctx, key, l.layered.layers[i].Policy)
}
