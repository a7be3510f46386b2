package core

import (
	"context"
	"math"
	"time"
)

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
	if gs[0].units > 0 || gs[1].units > 0 {
		go l.refundGrants(le, gs)
	}
}

// wantsRenewal reports whether le, asked for cost at now, should ask the
// store for a grant: what it holds would last less than an eighth of the
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
// for since the last renewal, at that rate for five eighths of a lifetime,
// at most twice the last share and 1 more (a server that wakes up grows
// into its rate), and at least the largest cost asked since if that is
// within about twice that share, within the policy's capacity. It sets the
// renewal's mark (low) to an eighth of a lifetime at that rate. A grant
// taken when what is held would last an eighth more is used from then on,
// for at most seven eighths of a lifetime: asking for less than that
// leaves little to expire, which a bucket cannot take back (the simulation
// at defaults, docs/leases.md: three quarters renewed with a quarter left
// used 95.8% of a token bucket's limit, this 99.2%, with fewer store
// calls). Fairness is renew's, from the store's fresh answer.
func (le *lease) nextShare(now int64) int64 {
	life := float64(le.life)
	rate := float64(le.demand) / float64(max(now-le.since, le.life/8, 1)) // units per ns
	want := int64(math.Ceil(rate * life * 5 / 8))
	s := max(1, min(want, 2*le.share+1))
	if le.dearest <= 2*s+1 {
		// The dearest request is covered only within twice the share:
		// one request of a huge cost must not take the layer's quota for
		// a lifetime (it goes to the store instead).
		s = max(s, le.dearest)
	}
	s = min(s, le.policy.capacity())
	le.low = min(int64(math.Ceil(rate*life/8)), (s+1)/2)
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
