package storetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Units of the scripts' times.
const (
	us = time.Microsecond
	ms = time.Millisecond
)

// fixedWindowScripts: one counter per epoch-aligned window. ResetAfter and,
// for denied requests, RetryAfter are the time left in the window.
func fixedWindowScripts() []script {
	fw := func(limit int64, window time.Duration) core.Policy {
		return policy(core.FixedWindow, limit, window, 0)
	}
	return []script{
		{name: "burst-then-deny", policy: fw(5, time.Second), steps: []step{
			{at: 0, want: ok(4, 1000*ms)},
			{at: 100 * ms, want: ok(3, 900*ms)},
			{at: 200 * ms, want: ok(2, 800*ms)},
			{at: 300 * ms, want: ok(1, 700*ms)},
			{at: 400 * ms, want: ok(0, 600*ms)},
			{at: 500 * ms, want: deny(0, 500*ms, 500*ms)},
			{at: 500 * ms, want: deny(0, 500*ms, 500*ms)},
			{at: 999 * ms, want: deny(0, 1*ms, 1*ms)},
			{at: 999500 * us, want: deny(0, 1*ms, 1*ms)}, // 500µs left, rounded up
			{at: 1000 * ms, want: ok(4, 1000*ms)},        // a new window: a whole quota
		}},
		// 12.345678s into a one-minute window: 47.654322s are left, which
		// rounds up to 47.655s.
		{name: "mid-window", policy: fw(3, time.Minute), start: 12345678 * us, steps: []step{
			{at: 0, want: ok(2, 47655*ms)},
			{at: 0, want: ok(1, 47655*ms)},
			{at: 0, want: ok(0, 47655*ms)},
			{at: 0, want: deny(0, 47655*ms, 47655*ms)},
			{at: 30 * time.Second, want: deny(0, 17655*ms, 17655*ms)},
			{at: 47653322 * us, want: deny(0, 1*ms, 1*ms)}, // 1ms before the window ends
			{at: 47654322 * us, want: ok(2, time.Minute)},  // the next window
		}},
		// The fixed window's known weakness: L in the last 5ms of a window,
		// L more in the first 5ms of the next.
		{name: "window-edge-admits-2L", policy: fw(5, time.Second), steps: []step{
			{at: 995 * ms, want: ok(4, 5*ms)},
			{at: 996 * ms, want: ok(3, 4*ms)},
			{at: 997 * ms, want: ok(2, 3*ms)},
			{at: 998 * ms, want: ok(1, 2*ms)},
			{at: 999 * ms, want: ok(0, 1*ms)},
			{at: 999 * ms, want: deny(0, 1*ms, 1*ms)},
			{at: 1000 * ms, want: ok(4, 1000*ms)},
			{at: 1001 * ms, want: ok(3, 999*ms)},
			{at: 1002 * ms, want: ok(2, 998*ms)},
			{at: 1003 * ms, want: ok(1, 997*ms)},
			{at: 1004 * ms, want: ok(0, 996*ms)},
			{at: 1005 * ms, want: deny(0, 995*ms, 995*ms)},
		}},
		{name: "weighted", policy: fw(10, time.Second), steps: []step{
			{at: 0, cost: 5, want: ok(5, 1000*ms)},
			{at: 100 * ms, cost: 4, want: ok(1, 900*ms)},
			// 9+2 > 10: a cost of 2 does not fit, and takes nothing
			// however often it is tried, while a cost of 1 still fits.
			{at: 200 * ms, cost: 2, want: deny(1, 800*ms, 800*ms)},
			{at: 200 * ms, cost: 2, want: deny(1, 800*ms, 800*ms)},
			{at: 250 * ms, cost: 2, want: deny(1, 750*ms, 750*ms)},
			{at: 300 * ms, cost: 1, want: ok(0, 700*ms)},
			{at: 300 * ms, cost: 1, want: deny(0, 700*ms, 700*ms)},
			{at: 1000 * ms, cost: 10, want: ok(0, 1000*ms)}, // cost == capacity
			{at: 1000 * ms, cost: 1, want: deny(0, 1000*ms, 1000*ms)},
			{at: 1500 * ms, cost: 10, want: deny(0, 500*ms, 500*ms)},
		}},
		{name: "isolation", policy: fw(2, time.Second), steps: []step{
			{at: 0, want: ok(1, 1000*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 1000*ms)},
			{at: 0, key: "other", want: ok(1, 1000*ms)},         // another client
			{at: 0, name: "other-policy", want: ok(1, 1000*ms)}, // another policy
			{at: 0, key: "other", want: ok(0, 1000*ms)},
			{at: 0, key: "other", want: deny(0, 1000*ms, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 1000*ms)},
		}},
		{name: "reset", policy: fw(2, time.Second), steps: []step{
			{at: 0, want: ok(1, 1000*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 100 * ms, want: deny(0, 900*ms, 900*ms)},
			{at: 100 * ms, reset: true},
			{at: 100 * ms, want: ok(1, 900*ms)},
			{at: 100 * ms, want: ok(0, 900*ms)},
			{at: 100 * ms, key: "never-seen", reset: true},
		}},
		{name: "limiter", policy: fw(3, time.Second), viaLimiter: true, steps: []step{
			{at: 0, want: ok(2, 1000*ms)},
			{at: 0, cost: 2, want: ok(0, 1000*ms)},
			{at: 400 * ms, want: deny(0, 600*ms, 600*ms)},
			{at: 400 * ms, reset: true},
			{at: 400 * ms, cost: 3, want: ok(0, 600*ms)},
		}},
	}
}

// slidingLogScripts: the units admitted in (now-W, now]. ResetAfter is the
// time until the newest of them leaves the window; RetryAfter, until enough
// of the oldest have left for the request to fit.
func slidingLogScripts() []script {
	sl := func(limit int64, window time.Duration) core.Policy {
		return policy(core.SlidingWindowLog, limit, window, 0)
	}
	return []script{
		{name: "burst-then-deny", policy: sl(3, time.Second), steps: []step{
			{at: 0, want: ok(2, 1000*ms)},
			{at: 300 * ms, want: ok(1, 1000*ms)},
			{at: 600 * ms, want: ok(0, 1000*ms)},
			{at: 700 * ms, want: deny(0, 900*ms, 300*ms)}, // newest out at 1.6s, oldest at 1s
			{at: 700 * ms, want: deny(0, 900*ms, 300*ms)},
			{at: 999 * ms, want: deny(0, 601*ms, 1*ms)},
			{at: 1000 * ms, want: ok(0, 1000*ms)},           // the unit of 0 is out
			{at: 1000 * ms, want: deny(0, 1000*ms, 300*ms)}, // next out: the unit of 300ms
			{at: 1299 * ms, want: deny(0, 701*ms, 1*ms)},
			{at: 1300 * ms, want: ok(0, 1000*ms)},
			{at: 2300 * ms, want: ok(2, 1000*ms)}, // 600ms, 1s and 1.3s all out
		}},
		// Nothing is aligned; a start 0.678ms into a millisecond shows the
		// rounding up.
		{name: "sub-millisecond", policy: sl(2, time.Minute), start: 12345678 * us, steps: []step{
			{at: 0, want: ok(1, time.Minute)},
			{at: 0, want: ok(0, time.Minute)},
			{at: 500 * us, want: deny(0, time.Minute, time.Minute)}, // 59.9995s, rounded up
			{at: 59999 * ms, want: deny(0, 1*ms, 1*ms)},
			{at: time.Minute, want: ok(1, time.Minute)},
		}},
		// Unlike the fixed window, L just before an epoch-aligned edge
		// leaves nothing for just after it.
		{name: "window-edge-no-2L", policy: sl(5, time.Second), steps: []step{
			{at: 995 * ms, want: ok(4, 1000*ms)},
			{at: 996 * ms, want: ok(3, 1000*ms)},
			{at: 997 * ms, want: ok(2, 1000*ms)},
			{at: 998 * ms, want: ok(1, 1000*ms)},
			{at: 999 * ms, want: ok(0, 1000*ms)},
			{at: 1000 * ms, want: deny(0, 999*ms, 995*ms)}, // newest out at 1.999s, oldest at 1.995s
			{at: 1500 * ms, want: deny(0, 499*ms, 495*ms)},
			{at: 1994 * ms, want: deny(0, 5*ms, 1*ms)},
			{at: 1995 * ms, want: ok(0, 1000*ms)},
			{at: 1995 * ms, want: deny(0, 1000*ms, 1*ms)}, // next out: the unit of 996ms
		}},
		{name: "weighted", policy: sl(10, time.Second), steps: []step{
			{at: 0, cost: 4, want: ok(6, 1000*ms)},
			{at: 100 * ms, cost: 5, want: ok(1, 1000*ms)},
			// 9+2-10 = 1 unit must leave: the oldest, of 0, at 1s.
			{at: 200 * ms, cost: 2, want: deny(1, 900*ms, 800*ms)},
			{at: 200 * ms, cost: 2, want: deny(1, 900*ms, 800*ms)},
			// 9+6-10 = 5 units must leave: 4 of 0, the 5th of 100ms, at 1.1s.
			{at: 200 * ms, cost: 6, want: deny(1, 900*ms, 900*ms)},
			{at: 200 * ms, cost: 1, want: ok(0, 1000*ms)},
			{at: 999 * ms, cost: 4, want: deny(0, 201*ms, 1*ms)},
			{at: 1000 * ms, cost: 4, want: ok(0, 1000*ms)},
			// Now 5 of 100ms, 1 of 200ms, 4 of 1s: all 10 must leave.
			{at: 1000 * ms, cost: 10, want: deny(0, 1000*ms, 1000*ms)},
			{at: 0, key: "b", cost: 10, want: ok(0, 1000*ms)}, // cost == capacity
			{at: 500 * ms, key: "b", cost: 10, want: deny(0, 500*ms, 500*ms)},
			{at: 1000 * ms, key: "b", cost: 10, want: ok(0, 1000*ms)},
		}},
		{name: "isolation", policy: sl(2, time.Second), steps: []step{
			{at: 0, want: ok(1, 1000*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 1000*ms)},
			{at: 0, key: "other", want: ok(1, 1000*ms)},
			{at: 0, name: "other-policy", want: ok(1, 1000*ms)},
			{at: 0, key: "other", want: ok(0, 1000*ms)},
			{at: 0, key: "other", want: deny(0, 1000*ms, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 1000*ms)},
		}},
		{name: "reset", policy: sl(2, time.Second), steps: []step{
			{at: 0, want: ok(1, 1000*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 100 * ms, want: deny(0, 900*ms, 900*ms)},
			{at: 100 * ms, reset: true},
			{at: 100 * ms, want: ok(1, 1000*ms)},
			{at: 100 * ms, want: ok(0, 1000*ms)},
			{at: 100 * ms, key: "never-seen", reset: true},
		}},
		{name: "limiter", policy: sl(3, time.Second), viaLimiter: true, steps: []step{
			{at: 0, want: ok(2, 1000*ms)},
			{at: 0, cost: 2, want: ok(0, 1000*ms)},
			{at: 400 * ms, want: deny(0, 600*ms, 600*ms)},
			{at: 400 * ms, reset: true},
			{at: 400 * ms, cost: 3, want: ok(0, 1000*ms)},
		}},
		nearMaxLogLimit(),
	}
}

// nearMaxLogLimit fills a log of 100,000 units per hour with 1000
// requests of cost 100, one a millisecond, and checks that it still
// answers, exactly.
func nearMaxLogLimit() script {
	s := script{name: "near-max-limit", policy: policy(core.SlidingWindowLog, limits.MaxLogLimit, time.Hour, 0)}
	for i := range int64(1000) {
		s.steps = append(s.steps, step{at: time.Duration(i) * ms, cost: 100, want: ok(limits.MaxLogLimit-100*(i+1), time.Hour)})
	}
	s.steps = append(s.steps,
		// Full: the newest units (999ms) leave at 1h+999ms, the oldest (0)
		// at 1h.
		step{at: time.Second, want: deny(0, time.Hour-1*ms, time.Hour-time.Second)},
		step{at: time.Hour, cost: 100, want: ok(0, time.Hour)}, // the 100 of 0 are out
		// 101 units must leave: the 100 of 1ms, then one of 2ms.
		step{at: time.Hour, cost: 101, want: deny(0, time.Hour, 2*ms)},
	)
	return s
}

// slidingCounterScripts: the previous window's count weighs
// prev*(W-elapsed)/W. ResetAfter runs to the end of the next window while
// this one has a count (it is the previous one then), else to the end of
// this one. RetryAfter is when the weight has decayed enough:
// prev*(W-el)/W <= L-cur-c, so W-el = floor((L-cur-c)*W/prev) µs; or, when
// cur+c > L, the same in the next window, with cur as its previous count.
func slidingCounterScripts() []script {
	sc := func(limit int64, window time.Duration) core.Policy {
		return policy(core.SlidingWindowCounter, limit, window, 0)
	}
	return []script{
		{name: "burst-then-deny", policy: sc(4, time.Second), steps: []step{
			{at: 0, want: ok(3, 2000*ms)},
			{at: 100 * ms, want: ok(2, 1900*ms)},
			{at: 200 * ms, want: ok(1, 1800*ms)},
			{at: 300 * ms, want: ok(0, 1700*ms)},
			// 4+1 > 4: in the next window, 4*(W-el)/W + 1 <= 4 once
			// W-el = floor(3W/4) = 750ms, at 1.25s.
			{at: 400 * ms, want: deny(0, 1600*ms, 850*ms)},
			{at: 400 * ms, want: deny(0, 1600*ms, 850*ms)},
			// 4*0.751 = 3.004 > 3.
			{at: 1249 * ms, want: deny(0, 751*ms, 1*ms)},
			{at: 1250 * ms, want: ok(0, 1750*ms)}, // 4*0.75 + 0 + 1 = 4
			// 3 + 1 + 1 > 4: 4*(W-el)/W <= 2 once W-el = 500ms.
			{at: 1250 * ms, want: deny(0, 1750*ms, 250*ms)},
			{at: 1500 * ms, want: ok(0, 1500*ms)}, // 4*0.5 + 1 + 1 = 4
			// 4*0.3 + 2 + 1 = 4.2 > 4: 4*(W-el)/W <= 1 once W-el = 250ms.
			{at: 1700 * ms, want: deny(0, 1300*ms, 50*ms)},
			{at: 1750 * ms, want: ok(0, 1250*ms)}, // 4*0.25 + 2 + 1 = 4
			{at: 5000 * ms, want: ok(3, 2000*ms)}, // long idle: all forgotten
		}},
		// Unlike the fixed window, L just before an edge leaves nothing for
		// just after it: the previous window weighs 5*(W-el)/W there.
		{name: "window-edge-no-2L", policy: sc(5, time.Second), steps: []step{
			{at: 995 * ms, want: ok(4, 1005*ms)},
			{at: 996 * ms, want: ok(3, 1004*ms)},
			{at: 997 * ms, want: ok(2, 1003*ms)},
			{at: 998 * ms, want: ok(1, 1002*ms)},
			{at: 999 * ms, want: ok(0, 1001*ms)},
			// 5*1 + 1 > 5: 5*(W-el)/W <= 4 once W-el = floor(4W/5) = 800ms.
			{at: 1000 * ms, want: deny(0, 1000*ms, 200*ms)},
			{at: 1199 * ms, want: deny(0, 801*ms, 1*ms)}, // 5*0.801 = 4.005 > 4
			{at: 1200 * ms, want: ok(0, 1800*ms)},        // 5*0.8 + 0 + 1 = 5
			{at: 1200 * ms, want: deny(0, 1800*ms, 200*ms)},
		}},
		// A rate that does not divide a second, starting mid-window
		// (500ms in); the step comments give absolute times.
		{name: "three-per-second", policy: sc(3, time.Second), start: 500 * ms, steps: []step{
			{at: 0, want: ok(2, 1500*ms)},
			{at: 100 * ms, want: ok(1, 1400*ms)},
			{at: 200 * ms, want: ok(0, 1300*ms)},
			// 800ms: 3+1 > 3; in the next window 3*(W-el)/W + 1 <= 3 once
			// W-el = floor(2W/3) = 666666µs: at 1333334µs, 533334µs away.
			{at: 300 * ms, want: deny(0, 1200*ms, 534*ms)},
			// 1333ms: 3*0.667 = 2.001 > 2; 334µs away, rounded up.
			{at: 833 * ms, want: deny(0, 667*ms, 1*ms)},
			// 1334ms: 3*0.666 + 0 + 1 = 2.998 <= 3; floor(3-2.998) = 0.
			{at: 834 * ms, want: ok(0, 1666*ms)},
			// 1700ms: 3*0.3 + 1 + 1 = 2.9 <= 3; floor(3-2.9) = 0.
			{at: 1200 * ms, want: ok(0, 1300*ms)},
			// 2700ms: the previous window has 2: 2*0.3 = 0.6;
			// 0.6+1 = 1.6, floor(3-1.6) = 1.
			{at: 2200 * ms, want: ok(1, 1300*ms)},
			{at: 2200 * ms, want: ok(0, 1300*ms)}, // 0.6 + 2 = 2.6
			// 0.6 + 2 + 1 > 3; floor((3-2-1)*W/2) = 0: at the window's end.
			{at: 2200 * ms, want: deny(0, 1300*ms, 300*ms)},
			{at: 2499 * ms, want: deny(0, 1001*ms, 1*ms)}, // 2999ms: 2*0.001 + 2 + 1 > 3
			{at: 2500 * ms, want: ok(0, 2000*ms)},         // 3s: 2*1 + 0 + 1 = 3
		}},
		{name: "weighted", policy: sc(10, time.Second), steps: []step{
			{at: 0, cost: 4, want: ok(6, 2000*ms)},
			{at: 100 * ms, cost: 5, want: ok(1, 1900*ms)},
			// 9+2 > 10: in the next window, 9*(W-el)/W + 2 <= 10 once
			// W-el = floor(8W/9) = 888888µs: at 1111112µs, 911112µs away.
			{at: 200 * ms, cost: 2, want: deny(1, 1800*ms, 912*ms)},
			{at: 200 * ms, cost: 2, want: deny(1, 1800*ms, 912*ms)},
			{at: 200 * ms, cost: 1, want: ok(0, 1800*ms)},
			// 10+1 > 10: W-el = floor(9W/10) = 900ms, at 1.1s.
			{at: 300 * ms, cost: 1, want: deny(0, 1700*ms, 800*ms)},
			{at: 1099 * ms, cost: 1, want: deny(0, 901*ms, 1*ms)}, // 10*0.901 = 9.01 > 9
			{at: 1100 * ms, cost: 1, want: ok(0, 1900*ms)},        // 10*0.9 + 0 + 1 = 10
		}},
		{name: "cost-equals-capacity", policy: sc(10, time.Second), steps: []step{
			{at: 0, cost: 10, want: ok(0, 2000*ms)},
			// 10+10 > 10: the next window must weigh 0, which it does at
			// its end, 2s.
			{at: 500 * ms, cost: 10, want: deny(0, 1500*ms, 1500*ms)},
			{at: 1000 * ms, cost: 10, want: deny(0, 1000*ms, 1000*ms)},
			// 10*0.001 = 0.01 still weighs: floor(10-0.01) = 9 would pass,
			// not 10.
			{at: 1999 * ms, cost: 10, want: deny(9, 1*ms, 1*ms)},
			{at: 2000 * ms, cost: 10, want: ok(0, 2000*ms)},
		}},
		// When cur+1 > 2, in the next window 2*(W-el)/W + 1 <= 2 once
		// W-el = floor(W/2): 1.5s.
		{name: "isolation", policy: sc(2, time.Second), steps: []step{
			{at: 0, want: ok(1, 2000*ms)},
			{at: 0, want: ok(0, 2000*ms)},
			{at: 0, want: deny(0, 2000*ms, 1500*ms)},
			{at: 0, key: "other", want: ok(1, 2000*ms)},
			{at: 0, name: "other-policy", want: ok(1, 2000*ms)},
			{at: 0, key: "other", want: ok(0, 2000*ms)},
			{at: 0, key: "other", want: deny(0, 2000*ms, 1500*ms)},
			{at: 0, want: deny(0, 2000*ms, 1500*ms)},
		}},
		{name: "reset", policy: sc(2, time.Second), steps: []step{
			{at: 0, want: ok(1, 2000*ms)},
			{at: 0, want: ok(0, 2000*ms)},
			{at: 100 * ms, want: deny(0, 1900*ms, 1400*ms)},
			{at: 100 * ms, reset: true},
			{at: 100 * ms, want: ok(1, 1900*ms)},
			{at: 100 * ms, want: ok(0, 1900*ms)},
			{at: 100 * ms, key: "never-seen", reset: true},
		}},
		{name: "limiter", policy: sc(3, time.Second), viaLimiter: true, steps: []step{
			{at: 0, want: ok(2, 2000*ms)},
			{at: 0, cost: 2, want: ok(0, 2000*ms)},
			// 3+1 > 3: W-el = floor(2W/3) = 666666µs in the next window,
			// at 1333334µs, 933334µs away.
			{at: 400 * ms, want: deny(0, 1600*ms, 934*ms)},
			{at: 400 * ms, reset: true},
			{at: 400 * ms, cost: 3, want: ok(0, 1600*ms)},
		}},
	}
}
