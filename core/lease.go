package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Leases (Policy.Lease; the guide is docs/leases.md). A leased layer's
// requests are decided in process from grants: shares of the layer's
// quota that the Limiter took from the store with an ordinary Take (Cost
// the share), so that every store serves leases as it serves requests and
// storetest proves both. They enter the decision sequence at one point,
// decide's leases step, between over and ask: the leased layers a grant
// can decide are decided there, the others go to the store in one Take as
// before, and the request is admitted only if all admit (a denial gives
// the units it reserved back to their grant).
//
// The bound. A grant is taken at store time t and used for at most
// Policy.Lease after the Limiter asked for it (so before t + Lease in real
// time, whatever the offset between the clocks), and never past the end
// of the window t is in for the window algorithms: each unit admitted in
// process was counted by the store in the window of its admission, so a
// FixedWindow or SlidingWindowCounter admits no more than without leases.
// A TokenBucket's admissions in any interval [a, b] are units it took in
// [a-Lease, b]: at most Burst + rate*(b-a) + rate*Lease, Lease*rate more
// than without leases. What a grant did not admit is given back when it
// expires (Store.Refund, dated at t); a Limiter that dies loses what it
// held.

// maxLeasedKeys bounds the keys a leased layer holds grants for: a flood
// of distinct keys on a leased layer goes to the store as a plain layer's
// would, rather than growing the table.
const maxLeasedKeys = 1024

// leaseTable holds a leased layer's leases, one per key.
type leaseTable struct {
	life  int64    // Policy.Lease, ns
	m     sync.Map // key, as the store sees it -> *lease
	n     atomic.Int64
	mu    sync.Mutex // serializes inserts and sweeps
	swept int64      // when the table was last swept, under mu
}

// grant is a share of a layer's quota held in process.
type grant struct {
	units   int64     // left to admit
	expires int64     // on the Limiter's clock (see Limiter.elapsed)
	at      time.Time // when the store took it: the time its refund is dated at
}

// lease is what a Limiter holds of one key's quota under a leased layer.
type lease struct {
	key    string
	policy Policy // the policy in force its grants were taken under
	life   int64  // Policy.Lease, ns

	mu       sync.Mutex
	gs       [2]grant // live grants, gs[0] expiring first; units 0 when unused
	share    int64    // the units the last renewal asked for
	low      int64    // renew when what it holds falls below (see nextShare)
	demand   int64    // cost units asked of the lease since the last renewal
	dearest  int64    // the largest cost asked since the last renewal: a share covers it
	since    int64    // when the last renewal was asked for
	fleet    int64    // the store's Remaining after its last answer
	reset    int64    // when the store said the quota would be whole again
	dry      int64    // until then the store has no share to give: denials in process
	calm     int64    // until then no renewal (the store failed)
	used     int64    // when it last decided
	partials int      // renewals in a row that got less than they asked for
	renewing bool
}

// maxPartials is how many renewals in a row may get less than they asked
// for before the lease waits (see renew).
const maxPartials = 4

// leaseOutcome is what a lease made of one request.
type leaseOutcome uint8

const (
	leasePlain    leaseOutcome = iota // not decided: the store decides
	leaseAdmitted                     // admitted, its cost reserved from a grant
	leaseDenied                       // denied: the store has no share to give
)

// leaseTables returns the lease tables of policies, one per layer, nil
// for a layer not leased, and the bits of the layers leased.
func leaseTables(policies []Policy) ([]*leaseTable, uint32) {
	var bits uint32
	var ts []*leaseTable
	for i := range policies {
		if policies[i].Lease <= 0 {
			continue
		}
		if ts == nil {
			ts = make([]*leaseTable, len(policies))
		}
		ts[i] = &leaseTable{life: int64(policies[i].Lease)}
		bits |= 1 << i
	}
	return ts, bits
}

// leaseInvalid reports why p's Lease is not usable, or "".
func (p Policy) leaseInvalid() string {
	switch {
	case p.Lease == 0:
		return ""
	case p.Lease < time.Millisecond || p.Lease > p.Window:
		return fmt.Sprintf("lease %v is out of range [1ms, the window %v] (0 leases nothing)", p.Lease, p.Window)
	case p.Algorithm == SlidingWindowLog || p.Algorithm == LeakyBucket:
		return fmt.Sprintf("%s cannot be leased: it dates every admission in the store (%s, %s and %s can)", p.Algorithm, FixedWindow, SlidingWindowCounter, TokenBucket)
	case p.Lockout != 0:
		return "a policy with a Lockout cannot be leased: its denials strike in the store"
	}
	return ""
}

// leases is decide's leases step: the requests of c of a leased layer that
// a grant can decide are decided in process, the others by ask. The
// request is admitted only if every layer admits; a denial in process asks
// the store nothing.
func (l *Limiter) leases(ctx context.Context, at time.Time, c *call, reqs []Request, w *watch) error {
	v := &c.v
	if ctx.Err() != nil { // as ask: a caller gone is answered first, a lease or not
		return l.canceledLayers(ctx, nil, reqs, v)
	}
	now := l.elapsed(at)
	var mine, denied uint32 // the requests decided in process: all, denied
	var held [limits.MaxLayers]*lease
	var took time.Time
	for j := range reqs {
		t := l.leased[c.layers[j]]
		if t == nil {
			continue
		}
		le := t.get(l, &reqs[j], now)
		if le == nil {
			continue
		}
		switch outcome, taken := l.fromLease(le, at, now, &reqs[j], &v.ds[j]); outcome {
		case leaseAdmitted:
			mine |= 1 << j
			held[j] = le
			if took.IsZero() || taken.Before(took) {
				took = taken // dates a Refund: the earliest take (see below)
			}
		case leaseDenied:
			mine |= 1 << j
			denied |= 1 << j
		}
	}
	if mine == 0 {
		return l.ask(ctx, at, c, reqs, w)
	}
	var err error
	switch {
	case denied != 0:
		// Denied in process: the other layers are not asked (as
		// overLayers).
		for j := range reqs {
			if mine&(1<<j) == 0 {
				v.ds[j] = notAsked(&reqs[j].Policy)
			}
		}
	case mine != 1<<len(reqs)-1:
		// One time dates a Refund of every layer, each counted when its
		// grant, or the store now, took it: the earliest of those times.
		// A give-back dated later than its units were taken would give
		// a token bucket back what drained since (found by
		// TestLeaseBoundSearch); one dated earlier errs toward counting
		// (a window that has passed gives nothing back).
		var stored time.Time
		stored, err = l.askRest(ctx, at, c, reqs, mine, w)
		if stored.IsZero() || stored.Before(took) {
			took = stored // zero: not the store's decision, nothing to refund
		}
	}
	if err != nil { // the caller left: nothing decided (see askRest)
		l.giveBackAll(reqs, &held)
		return err
	}
	v.took = took
	l.verdict(reqs, v, sourceKept, nil)
	if denied != 0 {
		for j := range v.ds {
			if mine&(1<<j) == 0 {
				v.ds[j].Remaining = 0
			}
		}
	}
	if !v.result().Allowed {
		l.giveBackAll(reqs, &held)
	}
	return nil
}

// giveBackAll gives the costs of reqs reserved from the leases of held
// back to them: the request was not admitted.
func (l *Limiter) giveBackAll(reqs []Request, held *[limits.MaxLayers]*lease) {
	for j, le := range held[:len(reqs)] {
		if le != nil {
			le.giveBack(reqs[j].Cost)
		}
	}
}

// askRest asks the store (by ask) for the requests of c that no lease
// decided (not bits of mine), in a call of their own, and copies their
// decisions into c's. It returns the time the store decided at.
func (l *Limiter) askRest(ctx context.Context, at time.Time, c *call, reqs []Request, mine uint32, w *watch) (time.Time, error) {
	m := callPool.Get().(*call)
	defer m.release()
	n := 0
	for j := range reqs {
		if mine&(1<<j) == 0 {
			m.reqs[n] = reqs[j]
			m.layers[n] = uint8(j)
			n++
		}
	}
	m.n = n
	m.v.ds = m.ds[:n]
	err := l.ask(ctx, at, m, m.reqs[:n], w)
	if err != nil {
		// Nothing decided: the request's decision is ask's.
		c.v.Decision, c.v.binding = *m.v.result(), int(m.layers[m.v.binding])
		return time.Time{}, err
	}
	for k := range n {
		c.v.ds[m.layers[k]] = m.v.ds[k]
	}
	if d := m.v.result(); d.Source != SourceStore {
		return time.Time{}, err
	}
	return m.v.took, err
}

// fromLease decides r, of le's key, from le's grants at now, into *d:
// admitted when they hold its cost, denied while the store has no share
// to give, else left to the store. It renews le when it runs low, and
// gives back its expired grants.
//
// It returns, with an admission, the time the store took the grant it
// drew from.
func (l *Limiter) fromLease(le *lease, at time.Time, now int64, r *Request, d *Decision) (leaseOutcome, time.Time) {
	le.mu.Lock()
	le.used = now
	le.demand += r.Cost
	le.dearest = max(le.dearest, r.Cost)
	if le.gs[0].units > 0 && le.gs[0].expires <= now || le.wantsRenewal(now, r.Cost) {
		le.mu.Unlock()
		l.tend(le, at, now, r.Cost)
		le.mu.Lock()
	}
	defer le.mu.Unlock()
	if took, ok := le.take(r.Cost, now); ok {
		*d = Decision{Allowed: true, Source: SourceLease, Limit: r.Policy.capacity()}
		d.Remaining = min(d.Limit, le.fleet+le.units(now))
		d.ResetAfter = ceilMs(le.reset - now)
		return leaseAdmitted, took
	}
	if now < le.dry {
		*d = Decision{Source: SourceLease, Limit: r.Policy.capacity(), RetryAfter: ceilMs(le.dry - now)}
		d.ResetAfter = max(d.RetryAfter, ceilMs(le.reset-now))
		return leaseDenied, time.Time{}
	}
	return leasePlain, time.Time{}
}
