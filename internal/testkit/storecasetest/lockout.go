package storecasetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
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

// lockoutCases are the cases of core.Policy.Lockout, on every algorithm: the
// escalation (30s, 60s, 120s, capped at 120s), the lockout denying every
// request without touching the algorithm's state, its exact end, the
// strikes forgotten Memory after the last offence (and not a microsecond
// earlier), and Reset forgiving the strikes. Every offence is the third
// request at an instant on a window boundary, and every lockout ends on
// one, so the algorithm's part is that of a fresh key each time.
func lockoutCases(alg core.Algorithm) []Case {
	p := policy(alg, 2, 10*time.Second, 0)
	p.Lockout, p.LockoutMax, p.LockoutMemory = 30*time.Second, 2*time.Minute, 5*time.Minute
	first, second := lockoutPattern(alg)
	s := time.Second
	// offence is the three requests at t, the third locked out for lock.
	offence := func(t, lock time.Duration, key string) []Step {
		return []Step{
			{At: t, Key: key, Want: first},
			{At: t, Key: key, Want: second},
			{At: t, Key: key, Want: locked(lock, lock)},
		}
	}
	var steps []Step
	add := func(st ...Step) { steps = append(steps, st...) }
	add(offence(0, 30*s, "")...) // strike 1: 30s, until 30s
	add(
		Step{At: 10 * s, Want: locked(20*s, 20*s)},
		Step{At: 15 * s, Cost: 2, Want: locked(15*s, 15*s)}, // any cost
		Step{At: 29*s + 999*ms, Want: locked(1*ms, 1*ms)},
		Step{At: 29*s + 999999*us, Want: locked(1*ms, 1*ms)}, // 1µs left, rounded up
	)
	add(offence(30*s, 60*s, "")...)   // strike 2: 60s, until 90s
	add(offence(90*s, 120*s, "")...)  // strike 3: 120s, the cap, until 210s
	add(offence(210*s, 120*s, "")...) // strike 4: capped at 120s, until 330s
	add(offence(330*s, 120*s, "")...) // strike 5: until 450s
	add(
		Step{At: 400 * s, Want: locked(50*s, 50*s)},
		Step{At: 400 * s, Reset: true}, // forgives: lockout and strikes
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
	add(Step{At: 750 * s, Key: "b", Want: first})

	// A fixed window of a minute with a lockout of 10s: the lockout lasts
	// until the window ends, when the request passes, so that a client
	// waiting its RetryAfter is not struck again.
	long := policy(core.FixedWindow, 2, time.Minute, 0)
	long.Lockout = 10 * time.Second
	out := []Case{{Name: "lockout-escalation", Policy: p, Steps: steps}}
	if alg == core.FixedWindow {
		out = append(out, Case{Name: "lockout-outlasted-by-window", Policy: long, ViaLimiter: true, Steps: []Step{
			{At: 5 * s, Want: ok(1, 55*s)},
			{At: 5 * s, Want: ok(0, 55*s)},
			{At: 5 * s, Want: locked(55*s, 55*s)},
			{At: 30 * s, Want: locked(30*s, 30*s)},
			{At: 60 * s, Want: ok(1, 60*s)},
			{At: 60 * s, Want: ok(0, 60*s)},
			// No escalation (Max 0): 10s, but the window's 60s are longer.
			{At: 60 * s, Want: locked(60*s, 60*s)},
		}})
		// Memory left 0 is the default, a day: strikes remembered.
		login := policy(core.FixedWindow, 5, 15*time.Minute, 0)
		login.Lockout, login.LockoutMax = 30*time.Minute, 2*time.Hour
		m := time.Minute
		out = append(out, Case{Name: "lockout-login", Policy: login, ViaLimiter: true, Steps: []Step{
			{At: 0, Want: ok(4, 15*m)},
			{At: 1 * s, Want: ok(3, 15*m-1*s)},
			{At: 2 * s, Want: ok(2, 15*m-2*s)},
			{At: 3 * s, Want: ok(1, 15*m-3*s)},
			{At: 4 * s, Want: ok(0, 15*m-4*s)},
			// The sixth attempt: locked out for 30 minutes, until 30m5s.
			{At: 5 * s, Want: locked(30*m, 30*m)},
			{At: 10 * m, Want: locked(20*m+5*s, 20*m+5*s)},
			// The window [30m, 45m) is whole again once the lockout ends.
			{At: 30*m + 5*s, Want: ok(4, 15*m-5*s)},
			{At: 30*m + 6*s, Want: ok(3, 15*m-6*s)},
			{At: 30*m + 7*s, Want: ok(2, 15*m-7*s)},
			{At: 30*m + 8*s, Want: ok(1, 15*m-8*s)},
			{At: 30*m + 9*s, Want: ok(0, 15*m-9*s)},
			// Again: an hour, until 1h30m10s.
			{At: 30*m + 10*s, Want: locked(60*m, 60*m)},
			{At: 90*m + 10*s, Want: ok(4, 15*m-10*s)},
			{At: 90*m + 11*s, Reset: true}, // a good login
			{At: 90*m + 11*s, Want: ok(4, 15*m-11*s)},
		}})
	}
	return out
}
