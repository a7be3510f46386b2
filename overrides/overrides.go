// Package overrides changes limits while the API runs: an operator's
// override of one layer's limit, an incident switch that halves every
// limit, a limit that shrinks as load rises. Each is a core.PolicySource:
// give it to a Limiter with core.WithPolicySource, and the Limiter
// consults it on every decision, for every layer, so that a change takes
// effect on the next request, without a restart.
//
//   - Set holds overrides in process, by layer (or policy) name: Put,
//     Delete, Replace.
//   - Load scales limits by a load signal the application supplies
//     (in-flight requests, a latency, a CPU reading): down as the signal
//     rises past a threshold, back up, with hysteresis, once it falls
//     below a lower one.
//   - Package rediswatch shares overrides through a Redis hash, so that
//     every app server picks a change up within a second.
//
// A client keeps its usage when its limit changes: the stores decide the
// new policy over the same state (see core.PolicySource), so a client that
// used 900 of 1,000 is denied under an override to 500 until its usage
// falls below 500, and gets the room at once under one to 10,000.
//
// No source here ever hands the Limiter an invalid policy, which it would
// decide by the layer's Policy.FailClosed (0 by default: failing open,
// limiting switched off), nor one
// looser than the override asks: what an override derives (a burst a
// slower rate cannot refill, a limit scaled to nothing) is clamped down to
// the nearest valid value, and what it sets itself that no valid policy
// has is refused (see Override).
//
//	live := overrides.New()
//	flow, err := httplimit.New(store, layers, httplimit.WithCore(core.WithPolicySource(live)))
//	...
//	live.Put("search", overrides.Override{Scale: 0.5}) // the next request sees half the limit
package overrides

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Set holds overrides in process, by layer name (or, for a Limiter built
// by core.NewLimiter, policy name). It is a core.PolicySource whose Adjust
// takes no lock and allocates nothing; a change is seen by the next
// request. It is safe for concurrent use.
//
// Put and Replace refuse an override that cannot apply to a policy the
// Set has adjusted for that layer (it remembers up to 8 a layer, for 4,096
// layers; see [Override]). One that meets, in Adjust, a policy it cannot
// apply to (a plan of a request's own, or a layer's first request after
// the Put) is not applied: the layer's last good override is, or none, and
// the Set logs it once ([Set.SetLogger]).
type Set struct {
	// Adjust is an atomic load of m and one lookup in an immutable map.
	// A Set remembers the policies it has adjusted, by layer (their
	// algorithm, limit, window and burst), within maxKnownShapes and
	// maxKnownNames, for Put and Replace to check an override against.
	mu       sync.Mutex                       // serializes changes, learning and reports
	m        atomic.Pointer[map[string]*slot] // each slot immutable once stored
	full     atomic.Bool                      // m has maxKnownNames names: no new one is learned
	reported atomic.Pointer[map[report]struct{}]
	logger   atomic.Pointer[slog.Logger] // nil: slog.Default()
}

// Bounds of what a Set remembers, so that requests bringing ever new
// plans cannot grow it without end. Past them, Put checks what it has,
// and Adjust still never applies an override to a policy it cannot.
const (
	maxKnownNames  = 4096
	maxKnownShapes = 8
	maxReports     = 1024
)

// slot is what a Set holds of one name: its override, if any, and the
// policies it has adjusted. One map of both keeps Adjust to one lookup,
// and a pointer to it, to a copy of 8 bytes. A change stores a new slot.
type slot struct {
	e      entry
	set    bool    // e is in force
	known  []shape // the policies of the name adjusted; never changed, replaced
	filled bool    // known has maxKnownShapes: no more are added
}

// entry is one layer's override, with the last good one before it.
type entry struct {
	o Override
	// good is the override of the layer in force before o that was good
	// for every policy the Set knew when o replaced it, or zero: what
	// Adjust decides by where o cannot apply.
	good Override
}

// shape is what of a policy an override's fit depends on.
type shape struct {
	alg    core.Algorithm
	limit  int64
	window time.Duration
	burst  int64
}

func shapeOf(p core.Policy) shape { return shape{p.Algorithm, p.Limit, p.Window, p.Burst} }

func (sh shape) policy(name string) core.Policy {
	return core.Policy{Name: name, Algorithm: sh.alg, Limit: sh.limit, Window: sh.window, Burst: sh.burst}
}

// report is an override Adjust could not apply to a policy, logged once.
type report struct {
	layer string
	o     Override
	sh    shape
}

// New returns an empty Set.
func New() *Set {
	s := new(Set)
	s.m.Store(&map[string]*slot{})
	s.reported.Store(&map[report]struct{}{})
	return s
}

// Check reports whether Put would take o for layer, without the change:
// the same errors, wrapping core.ErrInvalidOption.
func (s *Set) Check(layer string, o Override) error {
	if err := checkEntry(layer, o); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fits((*s.m.Load())[layer], layer, o)
}

// SetLogger makes the Set log to l (slog.Default when nil) the
// overrides it cannot apply.
func (s *Set) SetLogger(l *slog.Logger) { s.logger.Store(l) }

// Put sets the override of layer, replacing any. It fails, with an error
// wrapping core.ErrInvalidOption, when o does not validate, layer is no
// valid name (core.Policy's Name rules), or o cannot apply to a policy of
// layer the Set has adjusted (the error then wraps core.ErrInvalidOption
// too): a Limit a sliding log cannot keep, a Burst its rate cannot refill
// within 366 days.
func (s *Set) Put(layer string, o Override) error {
	if err := checkEntry(layer, o); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.m.Load()
	if err := fits(cur[layer], layer, o); err != nil {
		return err
	}
	next := maps.Clone(cur)
	next[layer] = successor(cur[layer], layer, o)
	s.m.Store(&next)
	return nil
}

// Delete removes the override of layer, if any.
func (s *Set) Delete(layer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.m.Load()
	sl := cur[layer]
	if sl == nil || !sl.set {
		return
	}
	next := maps.Clone(cur)
	next[layer] = &slot{known: sl.known, filled: sl.filled}
	s.m.Store(&next)
}

// Replace sets every override at once, as one change: the requests see
// either the old set or m, never a mix. It fails, changing nothing, when
// any entry does not validate or names no valid layer. An entry that
// cannot apply to a policy of its layer the Set has adjusted (which Put
// refuses) is kept, as one met later would be: Adjust decides by the
// layer's last good override and logs it once (see Set). Call Check
// first to refuse such entries.
func (s *Set) Replace(m map[string]Override) error {
	for layer, o := range m {
		if err := checkEntry(layer, o); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.m.Load()
	next := make(map[string]*slot, max(len(cur), len(m)))
	for name, sl := range cur {
		if len(sl.known) > 0 { // the policies stay known; the overrides go
			next[name] = &slot{known: sl.known, filled: sl.filled}
		}
	}
	for layer, o := range m {
		next[layer] = successor(cur[layer], layer, o)
	}
	s.m.Store(&next)
	return nil
}

// successor is the slot of layer once o replaces the override of cur
// (nil for a name the Set has nothing of).
func successor(cur *slot, layer string, o Override) *slot {
	next := &slot{set: true}
	if cur == nil {
		next.e = entry{o: o}
		return next
	}
	next.known, next.filled = cur.known, cur.filled
	switch {
	case !cur.set:
		next.e = entry{o: o}
	case cur.e.o == o:
		next.e = cur.e
	case fits(cur, layer, cur.e.o) == nil:
		next.e = entry{o: o, good: cur.e.o}
	default:
		next.e = entry{o: o, good: cur.e.good}
	}
	return next
}

// fits reports, with an error wrapping core.ErrInvalidOption and
// core.ErrInvalidOption, whether o cannot apply to a policy of layer (the
// policies of sl, which may be nil) the Set has adjusted.
func fits(sl *slot, layer string, o Override) error {
	if sl == nil {
		return nil
	}
	for _, sh := range sl.known {
		p := sh.policy(layer)
		if err := o.apply(&p); err != nil {
			return fmt.Errorf("%w: override of %q for its policy %s: %w", core.ErrInvalidOption, clip(layer), policyName(sh.policy("")), err)
		}
	}
	return nil
}

// Snapshot returns a copy of the overrides in force.
func (s *Set) Snapshot() map[string]Override {
	out := map[string]Override{}
	for layer, sl := range *s.m.Load() {
		if sl.set {
			out[layer] = sl.e.o
		}
	}
	return out
}

// Adjust returns p as the override of p.Name changes it, or p; never an
// invalid policy for a valid p, and never one looser than the override
// asks (see Override). Where the override cannot apply to p, it returns p
// as the layer's last good override changes it, or p, and logs it once
// (see Set). The override is the layer's, whatever the client: ctx and
// key are unused. It never fails: the error is always nil.
func (s *Set) Adjust(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
	return s.adjust(p), nil
}

// adjust is Adjust of p.
func (s *Set) adjust(p core.Policy) core.Policy {
	sl := (*s.m.Load())[p.Name]
	if sl == nil {
		if !s.full.Load() {
			s.learn(p.Name, shapeOf(p))
		}
		return p
	}
	if !sl.filled && !sl.knows(&p) {
		s.learn(p.Name, shapeOf(p))
	}
	if !sl.set {
		return p
	}
	q := p
	if err := sl.e.o.apply(&q); err != nil {
		return s.unfit(p, sl.e, err)
	}
	return q
}

// knows reports whether sl has p's shape.
func (sl *slot) knows(p *core.Policy) bool {
	for i := range sl.known {
		if k := &sl.known[i]; k.limit == p.Limit && k.window == p.Window && k.burst == p.Burst && k.alg == p.Algorithm {
			return true
		}
	}
	return false
}

// learn remembers sh under name, for Put's checks: Adjust's slow path,
// once per name and policy.
func (s *Set) learn(name string, sh shape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.m.Load()
	sl := cur[name]
	switch {
	case sl == nil && len(cur) >= maxKnownNames:
		s.full.Store(true)
		return
	case sl == nil:
		sl = &slot{}
	case sl.filled || slices.Contains(sl.known, sh):
		return
	}
	next := maps.Clone(cur)
	known := append(slices.Clip(sl.known), sh) // a new array: readers hold the old one
	next[name] = &slot{e: sl.e, set: sl.set, known: known, filled: len(known) >= maxKnownShapes}
	s.m.Store(&next)
}

// unfit is Adjust of p, whose override e.o cannot apply to it (err): p as
// the last good override changes it, or p; reported once.
func (s *Set) unfit(p core.Policy, e entry, err error) core.Policy {
	q, kept := p, "none: the policy as it came"
	if e.good != (Override{}) {
		if g := p; e.good.apply(&g) == nil {
			q, kept = g, e.good.String()
		}
	}
	r := report{layer: p.Name, o: e.o, sh: shapeOf(p)}
	if _, done := (*s.reported.Load())[r]; done {
		return q
	}
	s.mu.Lock()
	cur := *s.reported.Load()
	_, done := cur[r]
	if !done {
		next := map[report]struct{}{}
		if len(cur) < maxReports { // else forget them: some may be logged again
			next = maps.Clone(cur)
		}
		next[r] = struct{}{}
		s.reported.Store(&next)
	}
	s.mu.Unlock()
	if !done {
		l := s.logger.Load()
		if l == nil {
			l = slog.Default()
		}
		l.Warn("overrides: an override cannot apply to its layer's policy; deciding by the last good one",
			slog.String("layer", clip(p.Name)), slog.String("override", e.o.String()),
			slog.String("policy", limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)), slog.String("kept", kept), slog.Any("error", err))
	}
	return q
}

// checkEntry checks one override of layer, whatever its policy.
func checkEntry(layer string, o Override) error {
	if layer == "" {
		return fmt.Errorf("%w: override: empty layer name", core.ErrInvalidOption)
	}
	if err := (core.Policy{Name: layer, Algorithm: core.FixedWindow, Limit: 1, Window: limits.MinWindow}).Validate(); err != nil {
		return fmt.Errorf("%w: override of %q: %w", core.ErrInvalidOption, clip(layer), err)
	}
	return o.validate()
}

// policyName is p's Name, or the name NewLimiter would give it.
func policyName(p core.Policy) string {
	if p.Name != "" {
		return p.Name
	}
	return limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)
}
