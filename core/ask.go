package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

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
// breakers of bs that failed (see failedOn) but for those it probed (the
// probe reports itself), and but for bad input, which says nothing of the
// store's health.
func (l *Limiter) storeFailed(ctx context.Context, reqs []Request, at time.Time, v *verdict, bs *breakers, probes uint32, err error) error {
	if callerDone(ctx) {
		return l.canceledLayers(ctx, err, reqs, v)
	}
	if !errors.Is(err, ErrInvalidOption) {
		l.failedOn(bs, probes, reqs, v.ds, at) // before withoutStore clears v.ds
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
