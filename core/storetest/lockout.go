package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// locked is the Decision of a request denied by a lockout: Remaining 0,
// RetryAfter the time left on it.
func locked(resetAfter, retryAfter time.Duration) core.Decision {
	return core.Decision{ResetAfter: resetAfter, RetryAfter: retryAfter, LockedOut: true}
}

// lockoutPattern is what a fresh key of alg, 2 per 10s, decides for three
// requests at one instant on a boundary of its window: two admitted, the
// third denied by the algorithm, which the policy's lockout turns into a
// lockout (see the algorithm's own cases for these values: a window
// admits 2 and waits for its end; the sliding counter's previous window
// weighs 2*(1-el/10s), 1 from el = 5s on; the buckets refill one unit per
// 5s).
func lockoutPattern(alg core.Algorithm) (first, second core.Decision) {
	switch alg {
	case core.SlidingWindowCounter:
		return ok(1, 20*time.Second), ok(0, 20*time.Second)
	case core.TokenBucket:
		return ok(1, 5*time.Second), ok(0, 10*time.Second)
	case core.LeakyBucket:
		return ok(1, 5*time.Second), queued(0, 10*time.Second, 5*time.Second)
	}
	return ok(1, 10*time.Second), ok(0, 10*time.Second)
}

// lockoutScripts are the cases of core.Policy.Lockout, on every algorithm: the
// escalation (30s, 60s, 120s, capped at 120s), the lockout denying every
// request without touching the algorithm's state, its exact end, the
// strikes forgotten Memory after the last offence (and not a microsecond
// earlier), and Reset forgiving the strikes. Every offence is the third
// request at an instant on a window boundary, and every lockout ends on
// one, so the algorithm's part is that of a fresh key each time.
func lockoutScripts(alg core.Algorithm) []script {
	p := policy(alg, 2, 10*time.Second, 0)
	p.Lockout, p.LockoutMax, p.LockoutMemory = 30*time.Second, 2*time.Minute, 5*time.Minute
	first, second := lockoutPattern(alg)
	s := time.Second
	// offence is the three requests at t, the third locked out for lock.
	offence := func(t, lock time.Duration, key string) []step {
		return []step{
			{at: t, key: key, want: first},
			{at: t, key: key, want: second},
			{at: t, key: key, want: locked(lock, lock)},
		}
	}
	var steps []step
	add := func(st ...step) { steps = append(steps, st...) }
	add(offence(0, 30*s, "")...) // strike 1: 30s, until 30s
	add(
		step{at: 10 * s, want: locked(20*s, 20*s)},
		step{at: 15 * s, cost: 2, want: locked(15*s, 15*s)}, // any cost
		step{at: 29*s + 999*ms, want: locked(1*ms, 1*ms)},
		step{at: 29*s + 999999*us, want: locked(1*ms, 1*ms)}, // 1µs left, rounded up
	)
	add(offence(30*s, 60*s, "")...)   // strike 2: 60s, until 90s
	add(offence(90*s, 120*s, "")...)  // strike 3: 120s, the cap, until 210s
	add(offence(210*s, 120*s, "")...) // strike 4: capped at 120s, until 330s
	add(offence(330*s, 120*s, "")...) // strike 5: until 450s
	add(
		step{at: 400 * s, want: locked(50*s, 50*s)},
		step{at: 400 * s, reset: true}, // forgives: lockout and strikes
	)
	add(offence(400*s, 30*s, "")...) // strike 1 again: 30s, until 430s
	// The strikes are forgotten 5 minutes after the last offence, at
	// 700s: an offence then is a first one.
	add(offence(700*s, 30*s, "")...)
	// Another client: an offence 10s before the memory of its last one
	// ends escalates.
	add(offence(0, 30*s, "b")...)
	add(offence(290*s, 60*s, "b")...)
	// A client whose lockout ended long ago: it decides like any other.
	add(step{at: 750 * s, key: "b", want: first})

	// A fixed window of a minute with a lockout of 10s: the lockout lasts
	// until the window ends, when the request passes, so that a client
	// waiting its RetryAfter is not struck again.
	long := policy(core.FixedWindow, 2, time.Minute, 0)
	long.Lockout = 10 * time.Second
	out := []script{{name: "lockout-escalation", policy: p, steps: steps}}
	if alg == core.FixedWindow {
		out = append(out, script{name: "lockout-outlasted-by-window", policy: long, viaLimiter: true, steps: []step{
			{at: 5 * s, want: ok(1, 55*s)},
			{at: 5 * s, want: ok(0, 55*s)},
			{at: 5 * s, want: locked(55*s, 55*s)},
			{at: 30 * s, want: locked(30*s, 30*s)},
			{at: 60 * s, want: ok(1, 60*s)},
			{at: 60 * s, want: ok(0, 60*s)},
			// No escalation (Max 0): 10s, but the window's 60s are longer.
			{at: 60 * s, want: locked(60*s, 60*s)},
		}})
		// Memory left 0 is the default, a day: strikes remembered.
		login := policy(core.FixedWindow, 5, 15*time.Minute, 0)
		login.Lockout, login.LockoutMax = 30*time.Minute, 2*time.Hour
		m := time.Minute
		out = append(out, script{name: "lockout-login", policy: login, viaLimiter: true, steps: []step{
			{at: 0, want: ok(4, 15*m)},
			{at: 1 * s, want: ok(3, 15*m-1*s)},
			{at: 2 * s, want: ok(2, 15*m-2*s)},
			{at: 3 * s, want: ok(1, 15*m-3*s)},
			{at: 4 * s, want: ok(0, 15*m-4*s)},
			// The sixth attempt: locked out for 30 minutes, until 30m5s.
			{at: 5 * s, want: locked(30*m, 30*m)},
			{at: 10 * m, want: locked(20*m+5*s, 20*m+5*s)},
			// The window [30m, 45m) is whole again once the lockout ends.
			{at: 30*m + 5*s, want: ok(4, 15*m-5*s)},
			{at: 30*m + 6*s, want: ok(3, 15*m-6*s)},
			{at: 30*m + 7*s, want: ok(2, 15*m-7*s)},
			{at: 30*m + 8*s, want: ok(1, 15*m-8*s)},
			{at: 30*m + 9*s, want: ok(0, 15*m-9*s)},
			// Again: an hour, until 1h30m10s.
			{at: 30*m + 10*s, want: locked(60*m, 60*m)},
			{at: 90*m + 10*s, want: ok(4, 15*m-10*s)},
			{at: 90*m + 11*s, reset: true}, // a good login
			{at: 90*m + 11*s, want: ok(4, 15*m-11*s)},
		}})
	}
	return out
}

// testLockoutExtremes escalates a lockout from 4ms to 366 days,
// doubling at each of 70 offences (past 64), each made at
// the end of the lockout before: RetryAfter is the lockout length of each
// strike, exactly, and never overflows once capped.
func testLockoutExtremes(t tester, store core.Store, run string, alg core.Algorithm) {
	t.Helper()
	ctx := context.Background()
	p := policy(alg, 1, time.Millisecond, 0)
	p.Lockout, p.LockoutMax, p.LockoutMemory = 4*ms, limits.MaxLockout, limits.MaxLockoutMemory
	key := run + "-lockout-extreme-" + string(alg)
	at := epoch()
	for strike := 1; strike <= 70; strike++ {
		where := fmt.Sprintf("strike %d at %v", strike, at.Sub(epoch()))
		d, _, err := storecall.Take(store, ctx, at, core.Request{Key: key, Policy: p, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: the first request after the lockout: %s, %v", where, show(d), err)
		}
		d, _, err = storecall.Take(store, ctx, at, core.Request{Key: key, Policy: p, Cost: 1})
		length := limits.LockoutLength(p.Lockout, p.LockoutMax, strike)
		want := core.Decision{Limit: 1, ResetAfter: length, RetryAfter: length, LockedOut: true}
		if err != nil || !sameDecision(d, want, false) {
			t.Fatalf("%s: the offence:\n got %s, %v\nwant %s", where, show(d), err, show(want))
		}
		at = at.Add(length)
	}
}

// lockoutOf is a policy's three lockout fields, for the cases that run
// with and without a lockout (nil).
type lockoutOf struct{ first, most, memory time.Duration }

// set gives p lo's lockout fields, when lo is not nil.
func (lo *lockoutOf) set(p *core.Policy) {
	if lo != nil {
		p.Lockout, p.LockoutMax, p.LockoutMemory = lo.first, lo.most, lo.memory
	}
}
