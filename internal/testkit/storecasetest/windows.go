package storecasetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Units of the cases' times.
const (
	us = time.Microsecond
	ms = time.Millisecond
)

// fixedWindowCases: one counter per epoch-aligned window. ResetAfter and,
// for denied requests, RetryAfter are the time left in the window.
func fixedWindowCases() []Case {
	fw := func(limit int64, window time.Duration) core.Policy {
		return policy(core.FixedWindow, limit, window, 0)
	}
	return []Case{
		{Name: "burst-then-deny", Policy: fw(5, time.Second), Steps: []Step{
			{At: 0, Want: ok(4, 1000*ms)},
			{At: 100 * ms, Want: ok(3, 900*ms)},
			{At: 200 * ms, Want: ok(2, 800*ms)},
			{At: 300 * ms, Want: ok(1, 700*ms)},
			{At: 400 * ms, Want: ok(0, 600*ms)},
			{At: 500 * ms, Want: deny(0, 500*ms, 500*ms)},
			{At: 500 * ms, Want: deny(0, 500*ms, 500*ms)},
			{At: 999 * ms, Want: deny(0, 1*ms, 1*ms)},
			{At: 999500 * us, Want: deny(0, 1*ms, 1*ms)}, // 500µs left, rounded up
			{At: 1000 * ms, Want: ok(4, 1000*ms)},        // a new window: a whole quota
		}},
		// 12.345678s into a one-minute window: 47.654322s are left, which
		// rounds up to 47.655s.
		{Name: "mid-window", Policy: fw(3, time.Minute), Start: 12345678 * us, Steps: []Step{
			{At: 0, Want: ok(2, 47655*ms)},
			{At: 0, Want: ok(1, 47655*ms)},
			{At: 0, Want: ok(0, 47655*ms)},
			{At: 0, Want: deny(0, 47655*ms, 47655*ms)},
			{At: 30 * time.Second, Want: deny(0, 17655*ms, 17655*ms)},
			{At: 47653322 * us, Want: deny(0, 1*ms, 1*ms)}, // 1ms before the window ends
			{At: 47654322 * us, Want: ok(2, time.Minute)},  // the next window
		}},
		// The fixed window's known weakness: L in the last 5ms of a window,
		// L more in the first 5ms of the next.
		{Name: "window-edge-admits-2L", Policy: fw(5, time.Second), Steps: []Step{
			{At: 995 * ms, Want: ok(4, 5*ms)},
			{At: 996 * ms, Want: ok(3, 4*ms)},
			{At: 997 * ms, Want: ok(2, 3*ms)},
			{At: 998 * ms, Want: ok(1, 2*ms)},
			{At: 999 * ms, Want: ok(0, 1*ms)},
			{At: 999 * ms, Want: deny(0, 1*ms, 1*ms)},
			{At: 1000 * ms, Want: ok(4, 1000*ms)},
			{At: 1001 * ms, Want: ok(3, 999*ms)},
			{At: 1002 * ms, Want: ok(2, 998*ms)},
			{At: 1003 * ms, Want: ok(1, 997*ms)},
			{At: 1004 * ms, Want: ok(0, 996*ms)},
			{At: 1005 * ms, Want: deny(0, 995*ms, 995*ms)},
		}},
		{Name: "weighted", Policy: fw(10, time.Second), Steps: []Step{
			{At: 0, Cost: 5, Want: ok(5, 1000*ms)},
			{At: 100 * ms, Cost: 4, Want: ok(1, 900*ms)},
			// 9+2 > 10: a cost of 2 does not fit, and takes nothing
			// however often it is tried, while a cost of 1 still fits.
			{At: 200 * ms, Cost: 2, Want: deny(1, 800*ms, 800*ms)},
			{At: 200 * ms, Cost: 2, Want: deny(1, 800*ms, 800*ms)},
			{At: 250 * ms, Cost: 2, Want: deny(1, 750*ms, 750*ms)},
			{At: 300 * ms, Cost: 1, Want: ok(0, 700*ms)},
			{At: 300 * ms, Cost: 1, Want: deny(0, 700*ms, 700*ms)},
			{At: 1000 * ms, Cost: 10, Want: ok(0, 1000*ms)}, // cost == capacity
			{At: 1000 * ms, Cost: 1, Want: deny(0, 1000*ms, 1000*ms)},
			{At: 1500 * ms, Cost: 10, Want: deny(0, 500*ms, 500*ms)},
		}},
		{Name: "isolation", Policy: fw(2, time.Second), Steps: []Step{
			{At: 0, Want: ok(1, 1000*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 1000*ms)},
			{At: 0, Key: "other", Want: ok(1, 1000*ms)},               // another client
			{At: 0, PolicyName: "other-policy", Want: ok(1, 1000*ms)}, // another policy
			{At: 0, Key: "other", Want: ok(0, 1000*ms)},
			{At: 0, Key: "other", Want: deny(0, 1000*ms, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 1000*ms)},
		}},
		{Name: "reset", Policy: fw(2, time.Second), Steps: []Step{
			{At: 0, Want: ok(1, 1000*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 100 * ms, Want: deny(0, 900*ms, 900*ms)},
			{At: 100 * ms, Reset: true},
			{At: 100 * ms, Want: ok(1, 900*ms)},
			{At: 100 * ms, Want: ok(0, 900*ms)},
			{At: 100 * ms, Key: "never-seen", Reset: true},
		}},
		{Name: "limiter", Policy: fw(3, time.Second), ViaLimiter: true, Steps: []Step{
			{At: 0, Want: ok(2, 1000*ms)},
			{At: 0, Cost: 2, Want: ok(0, 1000*ms)},
			{At: 400 * ms, Want: deny(0, 600*ms, 600*ms)},
			{At: 400 * ms, Reset: true},
			{At: 400 * ms, Cost: 3, Want: ok(0, 600*ms)},
		}},
	}
}

// slidingLogCases: the units admitted in (now-W, now]. ResetAfter is the
// time until the newest of them leaves the window; RetryAfter, until enough
// of the oldest have left for the request to fit.
func slidingLogCases() []Case {
	sl := func(limit int64, window time.Duration) core.Policy {
		return policy(core.SlidingWindowLog, limit, window, 0)
	}
	return []Case{
		{Name: "burst-then-deny", Policy: sl(3, time.Second), Steps: []Step{
			{At: 0, Want: ok(2, 1000*ms)},
			{At: 300 * ms, Want: ok(1, 1000*ms)},
			{At: 600 * ms, Want: ok(0, 1000*ms)},
			{At: 700 * ms, Want: deny(0, 900*ms, 300*ms)}, // newest out at 1.6s, oldest at 1s
			{At: 700 * ms, Want: deny(0, 900*ms, 300*ms)},
			{At: 999 * ms, Want: deny(0, 601*ms, 1*ms)},
			{At: 1000 * ms, Want: ok(0, 1000*ms)},           // the unit of 0 is out
			{At: 1000 * ms, Want: deny(0, 1000*ms, 300*ms)}, // next out: the unit of 300ms
			{At: 1299 * ms, Want: deny(0, 701*ms, 1*ms)},
			{At: 1300 * ms, Want: ok(0, 1000*ms)},
			{At: 2300 * ms, Want: ok(2, 1000*ms)}, // 600ms, 1s and 1.3s all out
		}},
		// Nothing is aligned; a start 0.678ms into a millisecond shows the
		// rounding up.
		{Name: "sub-millisecond", Policy: sl(2, time.Minute), Start: 12345678 * us, Steps: []Step{
			{At: 0, Want: ok(1, time.Minute)},
			{At: 0, Want: ok(0, time.Minute)},
			{At: 500 * us, Want: deny(0, time.Minute, time.Minute)}, // 59.9995s, rounded up
			{At: 59999 * ms, Want: deny(0, 1*ms, 1*ms)},
			{At: time.Minute, Want: ok(1, time.Minute)},
		}},
		// Unlike the fixed window, L just before an epoch-aligned edge
		// leaves nothing for just after it.
		{Name: "window-edge-no-2L", Policy: sl(5, time.Second), Steps: []Step{
			{At: 995 * ms, Want: ok(4, 1000*ms)},
			{At: 996 * ms, Want: ok(3, 1000*ms)},
			{At: 997 * ms, Want: ok(2, 1000*ms)},
			{At: 998 * ms, Want: ok(1, 1000*ms)},
			{At: 999 * ms, Want: ok(0, 1000*ms)},
			{At: 1000 * ms, Want: deny(0, 999*ms, 995*ms)}, // newest out at 1.999s, oldest at 1.995s
			{At: 1500 * ms, Want: deny(0, 499*ms, 495*ms)},
			{At: 1994 * ms, Want: deny(0, 5*ms, 1*ms)},
			{At: 1995 * ms, Want: ok(0, 1000*ms)},
			{At: 1995 * ms, Want: deny(0, 1000*ms, 1*ms)}, // next out: the unit of 996ms
		}},
		{Name: "weighted", Policy: sl(10, time.Second), Steps: []Step{
			{At: 0, Cost: 4, Want: ok(6, 1000*ms)},
			{At: 100 * ms, Cost: 5, Want: ok(1, 1000*ms)},
			// 9+2-10 = 1 unit must leave: the oldest, of 0, at 1s.
			{At: 200 * ms, Cost: 2, Want: deny(1, 900*ms, 800*ms)},
			{At: 200 * ms, Cost: 2, Want: deny(1, 900*ms, 800*ms)},
			// 9+6-10 = 5 units must leave: 4 of 0, the 5th of 100ms, at 1.1s.
			{At: 200 * ms, Cost: 6, Want: deny(1, 900*ms, 900*ms)},
			{At: 200 * ms, Cost: 1, Want: ok(0, 1000*ms)},
			{At: 999 * ms, Cost: 4, Want: deny(0, 201*ms, 1*ms)},
			{At: 1000 * ms, Cost: 4, Want: ok(0, 1000*ms)},
			// Now 5 of 100ms, 1 of 200ms, 4 of 1s: all 10 must leave.
			{At: 1000 * ms, Cost: 10, Want: deny(0, 1000*ms, 1000*ms)},
			{At: 0, Key: "b", Cost: 10, Want: ok(0, 1000*ms)}, // cost == capacity
			{At: 500 * ms, Key: "b", Cost: 10, Want: deny(0, 500*ms, 500*ms)},
			{At: 1000 * ms, Key: "b", Cost: 10, Want: ok(0, 1000*ms)},
		}},
		{Name: "isolation", Policy: sl(2, time.Second), Steps: []Step{
			{At: 0, Want: ok(1, 1000*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 1000*ms)},
			{At: 0, Key: "other", Want: ok(1, 1000*ms)},
			{At: 0, PolicyName: "other-policy", Want: ok(1, 1000*ms)},
			{At: 0, Key: "other", Want: ok(0, 1000*ms)},
			{At: 0, Key: "other", Want: deny(0, 1000*ms, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 1000*ms)},
		}},
		{Name: "reset", Policy: sl(2, time.Second), Steps: []Step{
			{At: 0, Want: ok(1, 1000*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 100 * ms, Want: deny(0, 900*ms, 900*ms)},
			{At: 100 * ms, Reset: true},
			{At: 100 * ms, Want: ok(1, 1000*ms)},
			{At: 100 * ms, Want: ok(0, 1000*ms)},
			{At: 100 * ms, Key: "never-seen", Reset: true},
		}},
		{Name: "limiter", Policy: sl(3, time.Second), ViaLimiter: true, Steps: []Step{
			{At: 0, Want: ok(2, 1000*ms)},
			{At: 0, Cost: 2, Want: ok(0, 1000*ms)},
			{At: 400 * ms, Want: deny(0, 600*ms, 600*ms)},
			{At: 400 * ms, Reset: true},
			{At: 400 * ms, Cost: 3, Want: ok(0, 1000*ms)},
		}},
		nearMaxLogLimit(),
	}
}

// nearMaxLogLimit fills a log of 100,000 units per hour with 1000
// requests of cost 100, one a millisecond, and checks that it still
// answers, exactly.
func nearMaxLogLimit() Case {
	s := Case{Name: "near-max-limit", Policy: policy(core.SlidingWindowLog, limits.MaxLogLimit, time.Hour, 0)}
	for i := range int64(1000) {
		s.Steps = append(s.Steps, Step{At: time.Duration(i) * ms, Cost: 100, Want: ok(limits.MaxLogLimit-100*(i+1), time.Hour)})
	}
	s.Steps = append(s.Steps,
		// Full: the newest units (999ms) leave at 1h+999ms, the oldest (0)
		// at 1h.
		Step{At: time.Second, Want: deny(0, time.Hour-1*ms, time.Hour-time.Second)},
		Step{At: time.Hour, Cost: 100, Want: ok(0, time.Hour)}, // the 100 of 0 are out
		// 101 units must leave: the 100 of 1ms, then one of 2ms.
		Step{At: time.Hour, Cost: 101, Want: deny(0, time.Hour, 2*ms)},
	)
	return s
}

// slidingCounterCases: the previous window's count weighs
// prev*(W-elapsed)/W. ResetAfter runs to the end of the next window while
// this one has a count (it is the previous one then), else to the end of
// this one. RetryAfter is when the weight has decayed enough:
// prev*(W-el)/W <= L-cur-c, so W-el = floor((L-cur-c)*W/prev) µs; or, when
// cur+c > L, the same in the next window, with cur as its previous count.
func slidingCounterCases() []Case {
	sc := func(limit int64, window time.Duration) core.Policy {
		return policy(core.SlidingWindowCounter, limit, window, 0)
	}
	return []Case{
		{Name: "burst-then-deny", Policy: sc(4, time.Second), Steps: []Step{
			{At: 0, Want: ok(3, 2000*ms)},
			{At: 100 * ms, Want: ok(2, 1900*ms)},
			{At: 200 * ms, Want: ok(1, 1800*ms)},
			{At: 300 * ms, Want: ok(0, 1700*ms)},
			// 4+1 > 4: in the next window, 4*(W-el)/W + 1 <= 4 once
			// W-el = floor(3W/4) = 750ms, at 1.25s.
			{At: 400 * ms, Want: deny(0, 1600*ms, 850*ms)},
			{At: 400 * ms, Want: deny(0, 1600*ms, 850*ms)},
			// 4*0.751 = 3.004 > 3.
			{At: 1249 * ms, Want: deny(0, 751*ms, 1*ms)},
			{At: 1250 * ms, Want: ok(0, 1750*ms)}, // 4*0.75 + 0 + 1 = 4
			// 3 + 1 + 1 > 4: 4*(W-el)/W <= 2 once W-el = 500ms.
			{At: 1250 * ms, Want: deny(0, 1750*ms, 250*ms)},
			{At: 1500 * ms, Want: ok(0, 1500*ms)}, // 4*0.5 + 1 + 1 = 4
			// 4*0.3 + 2 + 1 = 4.2 > 4: 4*(W-el)/W <= 1 once W-el = 250ms.
			{At: 1700 * ms, Want: deny(0, 1300*ms, 50*ms)},
			{At: 1750 * ms, Want: ok(0, 1250*ms)}, // 4*0.25 + 2 + 1 = 4
			{At: 5000 * ms, Want: ok(3, 2000*ms)}, // long idle: all forgotten
		}},
		// Unlike the fixed window, L just before an edge leaves nothing for
		// just after it: the previous window weighs 5*(W-el)/W there.
		{Name: "window-edge-no-2L", Policy: sc(5, time.Second), Steps: []Step{
			{At: 995 * ms, Want: ok(4, 1005*ms)},
			{At: 996 * ms, Want: ok(3, 1004*ms)},
			{At: 997 * ms, Want: ok(2, 1003*ms)},
			{At: 998 * ms, Want: ok(1, 1002*ms)},
			{At: 999 * ms, Want: ok(0, 1001*ms)},
			// 5*1 + 1 > 5: 5*(W-el)/W <= 4 once W-el = floor(4W/5) = 800ms.
			{At: 1000 * ms, Want: deny(0, 1000*ms, 200*ms)},
			{At: 1199 * ms, Want: deny(0, 801*ms, 1*ms)}, // 5*0.801 = 4.005 > 4
			{At: 1200 * ms, Want: ok(0, 1800*ms)},        // 5*0.8 + 0 + 1 = 5
			{At: 1200 * ms, Want: deny(0, 1800*ms, 200*ms)},
		}},
		// A rate that does not divide a second, starting mid-window
		// (500ms in); the step comments give absolute times.
		{Name: "three-per-second", Policy: sc(3, time.Second), Start: 500 * ms, Steps: []Step{
			{At: 0, Want: ok(2, 1500*ms)},
			{At: 100 * ms, Want: ok(1, 1400*ms)},
			{At: 200 * ms, Want: ok(0, 1300*ms)},
			// 800ms: 3+1 > 3; in the next window 3*(W-el)/W + 1 <= 3 once
			// W-el = floor(2W/3) = 666666µs: at 1333334µs, 533334µs away.
			{At: 300 * ms, Want: deny(0, 1200*ms, 534*ms)},
			// 1333ms: 3*0.667 = 2.001 > 2; 334µs away, rounded up.
			{At: 833 * ms, Want: deny(0, 667*ms, 1*ms)},
			// 1334ms: 3*0.666 + 0 + 1 = 2.998 <= 3; floor(3-2.998) = 0.
			{At: 834 * ms, Want: ok(0, 1666*ms)},
			// 1700ms: 3*0.3 + 1 + 1 = 2.9 <= 3; floor(3-2.9) = 0.
			{At: 1200 * ms, Want: ok(0, 1300*ms)},
			// 2700ms: the previous window has 2: 2*0.3 = 0.6;
			// 0.6+1 = 1.6, floor(3-1.6) = 1.
			{At: 2200 * ms, Want: ok(1, 1300*ms)},
			{At: 2200 * ms, Want: ok(0, 1300*ms)}, // 0.6 + 2 = 2.6
			// 0.6 + 2 + 1 > 3; floor((3-2-1)*W/2) = 0: at the window's end.
			{At: 2200 * ms, Want: deny(0, 1300*ms, 300*ms)},
			{At: 2499 * ms, Want: deny(0, 1001*ms, 1*ms)}, // 2999ms: 2*0.001 + 2 + 1 > 3
			{At: 2500 * ms, Want: ok(0, 2000*ms)},         // 3s: 2*1 + 0 + 1 = 3
		}},
		{Name: "weighted", Policy: sc(10, time.Second), Steps: []Step{
			{At: 0, Cost: 4, Want: ok(6, 2000*ms)},
			{At: 100 * ms, Cost: 5, Want: ok(1, 1900*ms)},
			// 9+2 > 10: in the next window, 9*(W-el)/W + 2 <= 10 once
			// W-el = floor(8W/9) = 888888µs: at 1111112µs, 911112µs away.
			{At: 200 * ms, Cost: 2, Want: deny(1, 1800*ms, 912*ms)},
			{At: 200 * ms, Cost: 2, Want: deny(1, 1800*ms, 912*ms)},
			{At: 200 * ms, Cost: 1, Want: ok(0, 1800*ms)},
			// 10+1 > 10: W-el = floor(9W/10) = 900ms, at 1.1s.
			{At: 300 * ms, Cost: 1, Want: deny(0, 1700*ms, 800*ms)},
			{At: 1099 * ms, Cost: 1, Want: deny(0, 901*ms, 1*ms)}, // 10*0.901 = 9.01 > 9
			{At: 1100 * ms, Cost: 1, Want: ok(0, 1900*ms)},        // 10*0.9 + 0 + 1 = 10
		}},
		{Name: "cost-equals-capacity", Policy: sc(10, time.Second), Steps: []Step{
			{At: 0, Cost: 10, Want: ok(0, 2000*ms)},
			// 10+10 > 10: the next window must weigh 0, which it does at
			// its end, 2s.
			{At: 500 * ms, Cost: 10, Want: deny(0, 1500*ms, 1500*ms)},
			{At: 1000 * ms, Cost: 10, Want: deny(0, 1000*ms, 1000*ms)},
			// 10*0.001 = 0.01 still weighs: floor(10-0.01) = 9 would pass,
			// not 10.
			{At: 1999 * ms, Cost: 10, Want: deny(9, 1*ms, 1*ms)},
			{At: 2000 * ms, Cost: 10, Want: ok(0, 2000*ms)},
		}},
		// When cur+1 > 2, in the next window 2*(W-el)/W + 1 <= 2 once
		// W-el = floor(W/2): 1.5s.
		{Name: "isolation", Policy: sc(2, time.Second), Steps: []Step{
			{At: 0, Want: ok(1, 2000*ms)},
			{At: 0, Want: ok(0, 2000*ms)},
			{At: 0, Want: deny(0, 2000*ms, 1500*ms)},
			{At: 0, Key: "other", Want: ok(1, 2000*ms)},
			{At: 0, PolicyName: "other-policy", Want: ok(1, 2000*ms)},
			{At: 0, Key: "other", Want: ok(0, 2000*ms)},
			{At: 0, Key: "other", Want: deny(0, 2000*ms, 1500*ms)},
			{At: 0, Want: deny(0, 2000*ms, 1500*ms)},
		}},
		{Name: "reset", Policy: sc(2, time.Second), Steps: []Step{
			{At: 0, Want: ok(1, 2000*ms)},
			{At: 0, Want: ok(0, 2000*ms)},
			{At: 100 * ms, Want: deny(0, 1900*ms, 1400*ms)},
			{At: 100 * ms, Reset: true},
			{At: 100 * ms, Want: ok(1, 1900*ms)},
			{At: 100 * ms, Want: ok(0, 1900*ms)},
			{At: 100 * ms, Key: "never-seen", Reset: true},
		}},
		{Name: "limiter", Policy: sc(3, time.Second), ViaLimiter: true, Steps: []Step{
			{At: 0, Want: ok(2, 2000*ms)},
			{At: 0, Cost: 2, Want: ok(0, 2000*ms)},
			// 3+1 > 3: W-el = floor(2W/3) = 666666µs in the next window,
			// at 1333334µs, 933334µs away.
			{At: 400 * ms, Want: deny(0, 1600*ms, 934*ms)},
			{At: 400 * ms, Reset: true},
			{At: 400 * ms, Cost: 3, Want: ok(0, 1600*ms)},
		}},
	}
}
