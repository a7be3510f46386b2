package core

import (
	"context"
	"fmt"
	"math"
	"strings"
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
		switch outcome, at := l.fromLease(le, at, now, &reqs[j], &v.ds[j]); outcome {
		case leaseAdmitted:
			mine |= 1 << j
			held[j] = le
			if took.IsZero() || at.Before(took) {
				took = at // dates a Refund: the earliest take (see below)
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
		// Denied in process: the other layers are not asked, and say
		// nothing left until their Window has passed (as overLayers).
		for j := range reqs {
			if mine&(1<<j) == 0 {
				p := &reqs[j].Policy
				v.ds[j] = Decision{Allowed: true, Limit: p.capacity(), ResetAfter: p.Window}
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

// get returns the lease of r's key, made if need be, or nil when the
// table is full or the lease was taken under another policy (a
// PolicySource changed it): the store decides.
func (t *leaseTable) get(l *Limiter, r *Request, now int64) *lease {
	if x, ok := t.m.Load(r.Key); ok {
		le := x.(*lease)
		if samePolicy(&le.policy, &r.Policy) {
			return le
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if x, ok := t.m.Load(r.Key); ok {
		old := x.(*lease)
		if samePolicy(&old.policy, &r.Policy) {
			return old
		}
		t.m.Delete(r.Key)
		t.n.Add(-1)
		l.drop(old)
	}
	if t.n.Load() >= maxLeasedKeys && (now-t.swept < t.life || !t.sweep(l, now)) {
		return nil // full: swept at most once a lifetime, so that a flood of new keys costs no sweep each
	}
	le := &lease{key: strings.Clone(r.Key), policy: r.Policy, life: t.life, since: now, fleet: r.Policy.capacity()}
	t.m.Store(le.key, le)
	t.n.Add(1)
	return le
}

// sweep removes the leases that have decided nothing for two lifetimes,
// giving back what they hold, and reports whether it removed any.
func (t *leaseTable) sweep(l *Limiter, now int64) bool {
	t.swept = now
	removed := false
	t.m.Range(func(k, x any) bool {
		le := x.(*lease)
		le.mu.Lock()
		idle := !le.renewing && now-le.used > 2*t.life
		le.mu.Unlock()
		if idle {
			t.m.Delete(k)
			t.n.Add(-1)
			l.drop(le)
			removed = true
		}
		return true
	})
	return removed
}

// forget removes key's lease, if any, its grants forgotten (the store
// forgot them: Limiter.Reset).
func (t *leaseTable) forget(key string) {
	t.mu.Lock()
	if _, ok := t.m.LoadAndDelete(key); ok {
		t.n.Add(-1)
	}
	t.mu.Unlock()
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

// tend gives back le's expired grants and renews le if it runs low: on
// the caller's goroutine when the caller dated the request (a virtual
// clock: tests, simulations), else on one of its own, so that a request
// never waits for a renewal.
func (l *Limiter) tend(le *lease, at time.Time, now, cost int64) {
	le.mu.Lock()
	expired := le.expired(now)
	renew := le.wantsRenewal(now, cost)
	if renew {
		le.renewing = true
	}
	le.mu.Unlock()
	if at.IsZero() {
		if expired[0].units > 0 || expired[1].units > 0 || renew {
			go l.tendAsync(le, expired, renew)
		}
		return
	}
	l.refundGrants(le, expired)
	if renew {
		l.renew(le, at, now)
	}
}

// expired removes le's grants expired at now, and returns them.
func (le *lease) expired(now int64) [2]grant {
	var gs [2]grant
	for i := range le.gs {
		if g := le.gs[i]; g.units > 0 && g.expires <= now {
			gs[i] = g
			le.gs[i].units = 0
		}
	}
	le.order()
	return gs
}

// expireLater gives back what le's grants hold when they expire, in
// life: on the real clock, a timer; on a caller's, the Limiter's next
// decision of the key (tend) does.
func (l *Limiter) expireLater(le *lease, life int64) {
	time.AfterFunc(time.Duration(life), func() {
		now := l.elapsed(time.Time{})
		le.mu.Lock()
		gs := le.expired(now)
		le.mu.Unlock()
		l.refundGrants(le, gs)
	})
}

// tendAsync is tend's work on a goroutine of its own.
func (l *Limiter) tendAsync(le *lease, expired [2]grant, renew bool) {
	l.refundGrants(le, expired)
	if renew {
		l.renew(le, time.Time{}, l.elapsed(time.Time{}))
	}
}

// refundGrants gives what gs did not admit back to the store, each dated
// at the time the store took it.
func (l *Limiter) refundGrants(le *lease, gs [2]grant) {
	for _, g := range gs {
		if g.units > 0 {
			rs := []Request{{Key: le.key, Policy: le.policy, Cost: g.units}}
			_ = l.store.Refund(context.Background(), g.at, rs)
		}
	}
}

// drop gives back what le holds: it is no longer used.
func (l *Limiter) drop(le *lease) {
	le.mu.Lock()
	gs := le.gs
	le.gs = [2]grant{}
	le.mu.Unlock()
	go l.refundGrants(le, gs)
}

// wantsRenewal reports whether le, asked for cost at now, should ask the
// store for a grant: what it holds would last less than a quarter of the
// lifetime at its rate (or not cover the cost), no renewal is under way,
// and the store neither has nothing to give nor failed lately.
func (le *lease) wantsRenewal(now, cost int64) bool {
	if le.renewing || now < le.dry || now < le.calm {
		return false
	}
	return le.units(now) < max(cost, le.low)
}

// renew takes a grant for le from the store, at (the caller's time, or
// zero for the store's) and now (the Limiter's clock), and adds it to le.
// A share the store cannot give whole is asked again at what it has left,
// within fairness; a store with nothing left makes le deny until it has.
func (l *Limiter) renew(le *lease, at time.Time, now int64) {
	le.mu.Lock()
	s := le.nextShare(now)
	le.mu.Unlock()
	rs := []Request{{Key: le.key, Policy: le.policy, Cost: s}}
	out := make([]Decision, 1)
	ctx := context.Background()
	took, err := l.store.Take(ctx, at, rs, out)
	d := &out[0]
	var wait time.Duration // when the share would pass whole: after a part of it
	if err == nil && !d.Allowed && d.Remaining >= 1 {
		wait = d.RetryAfter
		rs[0].Cost = fairShare(d.Remaining)
		*d = Decision{}
		took, err = l.store.Take(ctx, at, rs, out)
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	le.renewing = false
	partials := le.partials
	life := le.lifeAt(took, at)
	if err != nil || life <= 0 {
		// A store that failed, or did not say when it took (what it
		// took is lost: the error is toward denying): no renewal for a
		// quarter of the lifetime.
		le.calm = now + le.life/4
		return
	}
	le.fleet = d.Remaining
	le.reset = now + int64(d.ResetAfter)
	if !d.Allowed {
		le.dry = now + le.dryFor(d.RetryAfter)
		return
	}
	le.add(grant{units: rs[0].Cost, expires: now + life, at: took})
	if at.IsZero() {
		l.expireLater(le, life)
	}
	le.partials = 0
	if wait > 0 {
		// Less than it asked for: the quota runs low. Halving what is
		// left drains a fixed window's in a few steps; when it stays low
		// (a bucket or sliding counter under more demand than its rate),
		// demand beyond the part waits here (a denial in process) for a
		// quarter of the lifetime, rather than at the store, a request
		// at a time.
		if le.partials = partials + 1; le.partials > maxPartials {
			le.dry = now + le.life/4
		}
	}
}

// dryFor is how long le denies what its grants cannot admit after the
// store said its share would pass in wait: wait, within a quarter of the
// lifetime and the lifetime, so that a Limiter asks the store at most
// eight times a lifetime (a share, then a part of it, every quarter)
// however short the wait.
func (le *lease) dryFor(wait time.Duration) int64 {
	return min(max(int64(wait), le.life/4), le.life)
}

// undry lets the lease of key, if any, ask the store again at once: units
// came back to it (Limiter.Refund).
func (t *leaseTable) undry(key string) {
	if x, ok := t.m.Load(key); ok {
		le := x.(*lease)
		le.mu.Lock()
		le.dry = 0
		le.mu.Unlock()
	}
}

// lifeAt is how long a grant of le that the store took at took may
// decide: the lease's lifetime, and for a window algorithm no longer than
// the window took is in (windows start at multiples of the Window since
// the Unix epoch, to the microsecond, in every store) from took, or from
// at if the caller dated the request; 0 when the store did not say when
// it took.
func (le *lease) lifeAt(took, at time.Time) int64 {
	life := le.life
	if le.policy.Algorithm == TokenBucket {
		return life
	}
	if took.IsZero() {
		return 0
	}
	w, t := le.policy.Window.Microseconds(), took.UnixMicro()
	left := (w - t%w) * int64(time.Microsecond)
	if t < 0 {
		left = (-t % w) * int64(time.Microsecond)
	}
	// The stores date windows to the microsecond, rounded down, but the
	// grant decides on the nanosecond clock from took on, or from at when
	// the caller dated the request (a store may return at's microsecond):
	// what is left of the window is less the nanoseconds past that
	// microsecond. Else a grant taken 500ns before a window's end
	// admitted up to 500ns into the next window, counted in the last
	// (found by TestLeaseBoundSearch).
	left -= int64(max(took.Nanosecond()%1000, at.Nanosecond()%1000))
	return min(life, left)
}

// nextShare is the units le asks the store for at now: what it was asked
// for since the last renewal, at that rate for three quarters of a
// lifetime (a grant taken when what is held would last a quarter more is
// used from then until it expires: asking for more would leave units to
// expire, which a bucket cannot take back), at most twice the last share
// and 1 more (a server that wakes up grows into its rate), and at least
// the largest cost asked since, within the policy's capacity. It sets
// the renewal's mark (low) to a quarter of a lifetime at that rate.
// Fairness is renew's, from the store's fresh answer.
func (le *lease) nextShare(now int64) int64 {
	life := float64(le.life)
	rate := float64(le.demand) / float64(max(now-le.since, le.life/8, 1)) // units per ns
	want := int64(math.Ceil(rate * life * 3 / 4))
	s := min(max(1, min(want, 2*le.share+1), le.dearest), le.policy.capacity())
	le.low = min(int64(math.Ceil(rate*life/4)), (s+1)/2)
	le.share, le.demand, le.dearest, le.since = s, 0, 0, now
	return s
}

// fairShare is the part of remaining units, fewer than its share, that a
// lease takes: half, so that as the quota runs low each Limiter that asks
// takes half of what is left, shares shrink with it, and the last units
// go one by one to those that ask rather than all to the first.
func fairShare(remaining int64) int64 { return max(1, (remaining+1)/2) }

// units is what le's live grants hold at now.
func (le *lease) units(now int64) int64 {
	n := int64(0)
	for _, g := range le.gs {
		if g.units > 0 && g.expires > now {
			n += g.units
		}
	}
	return n
}

// take reserves cost from le's live grants, the first to expire first,
// and reports whether they held it, and when the store took the first it
// drew from.
func (le *lease) take(cost, now int64) (took time.Time, ok bool) {
	if le.units(now) < cost {
		return took, false
	}
	for i := range le.gs {
		g := &le.gs[i]
		if g.units == 0 || g.expires <= now {
			continue
		}
		if took.IsZero() {
			took = g.at
		}
		k := min(cost, g.units)
		g.units -= k
		cost -= k
		if cost == 0 {
			break
		}
	}
	return took, true
}

// giveBack returns cost, reserved by a request that was then denied, to
// le's grant that expires first: never used later than the grant it came
// from (given back to the store when that grant has expired meanwhile).
func (le *lease) giveBack(cost int64) {
	le.mu.Lock()
	i := 0
	if le.gs[0].at.IsZero() {
		i = 1
	}
	le.gs[i].units += cost
	le.mu.Unlock()
}

// add adds g to le's grants; with two live already, the first to expire
// makes room (it is given back when it expires: held until then).
func (le *lease) add(g grant) {
	switch {
	case le.gs[0].units == 0:
		le.gs[0] = g
	case le.gs[1].units == 0:
		le.gs[1] = g
	default:
		le.gs[1].units += g.units // merged into the later one, dated by it
		le.gs[1].expires = min(le.gs[1].expires, g.expires)
	}
	le.order()
}

// order keeps gs[0] the first live grant to expire.
func (le *lease) order() {
	if le.gs[0].units == 0 || le.gs[1].units > 0 && le.gs[1].expires < le.gs[0].expires {
		le.gs[0], le.gs[1] = le.gs[1], le.gs[0]
	}
}

// ceilMs is ns as a Decision's duration: whole milliseconds, rounded up,
// never negative.
func ceilMs(ns int64) time.Duration {
	if ns <= 0 {
		return 0
	}
	return time.Duration((ns + int64(time.Millisecond) - 1) / int64(time.Millisecond) * int64(time.Millisecond))
}
