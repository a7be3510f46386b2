package storecasetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
)

// tokenBucketCases: B tokens, refilled at r = L/W. Remaining is the
// whole tokens left; ResetAfter is (B-tokens)/r; RetryAfter, (c-tokens)/r.
func tokenBucketCases() []Case {
	tb := func(limit int64, window time.Duration, burst int64) core.Policy {
		return policy(core.TokenBucket, limit, window, burst)
	}
	return []Case{
		// One token per 200ms.
		{Name: "burst-then-deny", Policy: tb(5, time.Second, 0), Steps: []Step{
			{At: 0, Want: ok(4, 200*ms)},
			{At: 0, Want: ok(3, 400*ms)},
			{At: 0, Want: ok(2, 600*ms)},
			{At: 0, Want: ok(1, 800*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 200*ms)},
			{At: 0, Want: deny(0, 1000*ms, 200*ms)},
			{At: 100 * ms, Want: deny(0, 900*ms, 100*ms)}, // half a token
			{At: 200 * ms, Want: ok(0, 1000*ms)},
			{At: 1200 * ms, Want: ok(4, 200*ms)},   // refilled to B, and no more
			{At: time.Minute, Want: ok(4, 200*ms)}, // long idle: still B
		}},
		// 1ms before the token is whole: 0.995 tokens, 0.005 missing, which
		// take exactly 1ms at 5/s. The bucket is whole 4.005 tokens later:
		// 801ms.
		{Name: "retry-1ms-before", Policy: tb(5, time.Second, 0), Steps: []Step{
			{At: 0, Cost: 5, Want: ok(0, 1000*ms)},
			{At: 199 * ms, Want: deny(0, 801*ms, 1*ms)},
			{At: 200 * ms, Want: ok(0, 1000*ms)},
		}},
		// Burst 5 under a limit of 10/s: one token per 100ms, at most 5.
		{Name: "burst-below-limit", Policy: tb(10, time.Second, 5), Steps: []Step{
			{At: 0, Want: ok(4, 100*ms)},
			{At: 0, Want: ok(3, 200*ms)},
			{At: 0, Want: ok(2, 300*ms)},
			{At: 0, Want: ok(1, 400*ms)},
			{At: 0, Want: ok(0, 500*ms)},
			{At: 0, Want: deny(0, 500*ms, 100*ms)},
			{At: 100 * ms, Want: ok(0, 500*ms)},
			{At: 150 * ms, Want: deny(0, 450*ms, 50*ms)},
			{At: 200 * ms, Want: ok(0, 500*ms)},
			{At: 700 * ms, Want: ok(4, 100*ms)},
			{At: 2000 * ms, Cost: 5, Want: ok(0, 500*ms)}, // cost == capacity
		}},
		// Burst 6 over a limit of 2/s: one token per 500ms.
		{Name: "burst-above-limit", Policy: tb(2, time.Second, 6), Steps: []Step{
			{At: 0, Cost: 6, Want: ok(0, 3000*ms)},
			{At: 0, Want: deny(0, 3000*ms, 500*ms)},
			{At: 250 * ms, Want: deny(0, 2750*ms, 250*ms)},
			{At: 500 * ms, Want: ok(0, 3000*ms)},
			{At: 1000 * ms, Cost: 2, Want: deny(1, 2500*ms, 500*ms)}, // 1 token, 2 wanted
			{At: 1000 * ms, Want: ok(0, 3000*ms)},
			{At: 4000 * ms, Cost: 6, Want: ok(0, 3000*ms)},
		}},
		// A rate that does not divide a second: one token per 333333.3µs.
		{Name: "three-per-second", Policy: tb(3, time.Second, 0), Start: 250 * ms, Steps: []Step{
			{At: 0, Want: ok(2, 334*ms)}, // 333333.3µs, rounded up
			{At: 0, Want: ok(1, 667*ms)}, // 666666.7µs
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 334*ms)},
			// 0.999 tokens: 0.001 missing, 333.3µs; 2.001 to whole, 667ms.
			{At: 333 * ms, Want: deny(0, 667*ms, 1*ms)},
			// 1.002 tokens, 0.002 left: 2.998 to whole, 999333.3µs.
			{At: 334 * ms, Want: ok(0, 1000*ms)},
			// 0.002 + 0.766*3 = 2.3 tokens; 1.3 left: 1.7 to whole,
			// 566666.7µs.
			{At: 1100 * ms, Want: ok(1, 567*ms)},
			// 0.7 missing: 233333.3µs.
			{At: 1100 * ms, Cost: 2, Want: deny(1, 567*ms, 234*ms)},
		}},
		{Name: "weighted", Policy: tb(10, time.Second, 0), Steps: []Step{
			{At: 0, Cost: 5, Want: ok(5, 500*ms)},
			{At: 0, Cost: 4, Want: ok(1, 900*ms)},
			{At: 0, Cost: 2, Want: deny(1, 900*ms, 100*ms)}, // 1 token, 2 wanted
			{At: 0, Cost: 2, Want: deny(1, 900*ms, 100*ms)},
			{At: 0, Cost: 1, Want: ok(0, 1000*ms)},
			{At: 50 * ms, Want: deny(0, 950*ms, 50*ms)},
			{At: 300 * ms, Cost: 3, Want: ok(0, 1000*ms)},
			{At: 300 * ms, Cost: 10, Want: deny(0, 1000*ms, 1000*ms)}, // cost == capacity
			{At: 1300 * ms, Cost: 10, Want: ok(0, 1000*ms)},
		}},
		// One token per 500ms.
		{Name: "isolation", Policy: tb(2, time.Second, 0), Steps: []Step{
			{At: 0, Want: ok(1, 500*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 0, Want: deny(0, 1000*ms, 500*ms)},
			{At: 0, Key: "other", Want: ok(1, 500*ms)},
			{At: 0, PolicyName: "other-policy", Want: ok(1, 500*ms)},
			{At: 0, Key: "other", Want: ok(0, 1000*ms)},
			{At: 0, Key: "other", Want: deny(0, 1000*ms, 500*ms)},
			{At: 0, Want: deny(0, 1000*ms, 500*ms)},
		}},
		{Name: "reset", Policy: tb(2, time.Second, 0), Steps: []Step{
			{At: 0, Want: ok(1, 500*ms)},
			{At: 0, Want: ok(0, 1000*ms)},
			{At: 100 * ms, Want: deny(0, 900*ms, 400*ms)}, // 0.2 tokens
			{At: 100 * ms, Reset: true},
			{At: 100 * ms, Want: ok(1, 500*ms)},
			{At: 100 * ms, Want: ok(0, 1000*ms)},
			{At: 100 * ms, Key: "never-seen", Reset: true},
		}},
		// One token per 250ms.
		{Name: "limiter", Policy: tb(4, time.Second, 0), ViaLimiter: true, Steps: []Step{
			{At: 0, Want: ok(3, 250*ms)},
			{At: 0, Cost: 3, Want: ok(0, 1000*ms)},
			{At: 125 * ms, Want: deny(0, 875*ms, 125*ms)}, // half a token
			{At: 125 * ms, Reset: true},
			{At: 125 * ms, Cost: 4, Want: ok(0, 1000*ms)},
		}},
	}
}

// leakyBucketCases: a queue of depth B drained at r = L/W. An admitted
// request waits Delay = level/r, the queue ahead of it; Remaining is the
// whole free places; ResetAfter is level/r; RetryAfter, (level+c-B)/r.
func leakyBucketCases() []Case {
	lb := func(limit int64, window time.Duration, burst int64) core.Policy {
		return policy(core.LeakyBucket, limit, window, burst)
	}
	return []Case{
		// One unit leaves every 100ms: the burst of 5 leaves at 0, 100ms,
		// ..., 400ms.
		{Name: "shapes-at-rate", Policy: lb(10, time.Second, 5), Steps: []Step{
			{At: 0, Want: queued(4, 100*ms, 0)},
			{At: 0, Want: queued(3, 200*ms, 100*ms)},
			{At: 0, Want: queued(2, 300*ms, 200*ms)},
			{At: 0, Want: queued(1, 400*ms, 300*ms)},
			{At: 0, Want: queued(0, 500*ms, 400*ms)},
			{At: 0, Want: deny(0, 500*ms, 100*ms)},
			{At: 0, Want: deny(0, 500*ms, 100*ms)},
			{At: 50 * ms, Want: deny(0, 450*ms, 50*ms)}, // 4.5 queued
			{At: 99 * ms, Want: deny(0, 401*ms, 1*ms)},  // 4.01 queued
			{At: 100 * ms, Want: queued(0, 500*ms, 400*ms)},
			{At: 1000 * ms, Want: queued(4, 100*ms, 0)}, // drained
		}},
		{Name: "weighted", Policy: lb(10, time.Second, 0), Steps: []Step{
			{At: 0, Cost: 5, Want: queued(5, 500*ms, 0)},
			{At: 0, Cost: 4, Want: queued(1, 900*ms, 500*ms)}, // behind 5 units
			{At: 0, Cost: 2, Want: deny(1, 900*ms, 100*ms)},   // 9+2-10 = 1 unit must leave
			{At: 0, Cost: 2, Want: deny(1, 900*ms, 100*ms)},
			{At: 0, Cost: 1, Want: queued(0, 1000*ms, 900*ms)},
			{At: 500 * ms, Cost: 5, Want: queued(0, 1000*ms, 500*ms)},
			{At: 500 * ms, Cost: 10, Want: deny(0, 1000*ms, 1000*ms)}, // cost == capacity
			{At: 1000 * ms, Cost: 10, Want: deny(5, 500*ms, 500*ms)},
			{At: 1500 * ms, Cost: 10, Want: queued(0, 1000*ms, 0)},
		}},
		// Burst 3 over a limit of 1/s: one unit leaves every second.
		{Name: "burst-above-limit", Policy: lb(1, time.Second, 3), Steps: []Step{
			{At: 0, Want: queued(2, 1000*ms, 0)},
			{At: 0, Want: queued(1, 2000*ms, 1000*ms)},
			{At: 0, Want: queued(0, 3000*ms, 2000*ms)},
			{At: 0, Want: deny(0, 3000*ms, 1000*ms)},
			{At: 500 * ms, Want: deny(0, 2500*ms, 500*ms)},
			{At: 1000 * ms, Want: queued(0, 3000*ms, 2000*ms)},
		}},
		// A rate that does not divide a second: one unit per 333333.3µs.
		{Name: "three-per-second", Policy: lb(3, time.Second, 0), Steps: []Step{
			{At: 0, Want: queued(2, 334*ms, 0)},
			{At: 0, Want: queued(1, 667*ms, 334*ms)},
			{At: 0, Want: queued(0, 1000*ms, 667*ms)},
			{At: 0, Want: deny(0, 1000*ms, 334*ms)},
			// 2.001 queued: 0.001 over, 333.3µs; 667ms to drain.
			{At: 333 * ms, Want: deny(0, 667*ms, 1*ms)},
			// 1.998 queued: waits 666ms; 2.998 then, 999333.3µs to drain.
			{At: 334 * ms, Want: queued(0, 1000*ms, 666*ms)},
		}},
		// One unit per 500ms.
		{Name: "isolation", Policy: lb(2, time.Second, 0), Steps: []Step{
			{At: 0, Want: queued(1, 500*ms, 0)},
			{At: 0, Want: queued(0, 1000*ms, 500*ms)},
			{At: 0, Want: deny(0, 1000*ms, 500*ms)},
			{At: 0, Key: "other", Want: queued(1, 500*ms, 0)},
			{At: 0, PolicyName: "other-policy", Want: queued(1, 500*ms, 0)},
			{At: 0, Key: "other", Want: queued(0, 1000*ms, 500*ms)},
			{At: 0, Key: "other", Want: deny(0, 1000*ms, 500*ms)},
			{At: 0, Want: deny(0, 1000*ms, 500*ms)},
		}},
		{Name: "reset", Policy: lb(2, time.Second, 0), Steps: []Step{
			{At: 0, Want: queued(1, 500*ms, 0)},
			{At: 0, Want: queued(0, 1000*ms, 500*ms)},
			{At: 100 * ms, Want: deny(0, 900*ms, 400*ms)}, // 1.8 queued
			{At: 100 * ms, Reset: true},
			{At: 100 * ms, Want: queued(1, 500*ms, 0)},
			{At: 100 * ms, Want: queued(0, 1000*ms, 500*ms)},
			{At: 100 * ms, Key: "never-seen", Reset: true},
		}},
		// One unit per 250ms.
		{Name: "limiter", Policy: lb(4, time.Second, 0), ViaLimiter: true, Steps: []Step{
			{At: 0, Want: queued(3, 250*ms, 0)},
			{At: 0, Cost: 3, Want: queued(0, 1000*ms, 250*ms)},
			{At: 125 * ms, Want: deny(0, 875*ms, 125*ms)}, // 3.5 queued
			{At: 125 * ms, Reset: true},
			{At: 125 * ms, Cost: 4, Want: queued(0, 1000*ms, 0)},
		}},
	}
}
