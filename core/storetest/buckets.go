package storetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
)

// tokenBucketScripts: B tokens, refilled at r = L/W. Remaining is the
// whole tokens left; ResetAfter is (B-tokens)/r; RetryAfter, (c-tokens)/r.
func tokenBucketScripts() []script {
	tb := func(limit int64, window time.Duration, burst int64) core.Policy {
		return policy(core.TokenBucket, limit, window, burst)
	}
	return []script{
		// One token per 200ms.
		{name: "burst-then-deny", policy: tb(5, time.Second, 0), steps: []step{
			{at: 0, want: ok(4, 200*ms)},
			{at: 0, want: ok(3, 400*ms)},
			{at: 0, want: ok(2, 600*ms)},
			{at: 0, want: ok(1, 800*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 200*ms)},
			{at: 0, want: deny(0, 1000*ms, 200*ms)},
			{at: 100 * ms, want: deny(0, 900*ms, 100*ms)}, // half a token
			{at: 200 * ms, want: ok(0, 1000*ms)},
			{at: 1200 * ms, want: ok(4, 200*ms)},   // refilled to B, and no more
			{at: time.Minute, want: ok(4, 200*ms)}, // long idle: still B
		}},
		// 1ms before the token is whole: 0.995 tokens, 0.005 missing, which
		// take exactly 1ms at 5/s. The bucket is whole 4.005 tokens later:
		// 801ms.
		{name: "retry-1ms-before", policy: tb(5, time.Second, 0), steps: []step{
			{at: 0, cost: 5, want: ok(0, 1000*ms)},
			{at: 199 * ms, want: deny(0, 801*ms, 1*ms)},
			{at: 200 * ms, want: ok(0, 1000*ms)},
		}},
		// Burst 5 under a limit of 10/s: one token per 100ms, at most 5.
		{name: "burst-below-limit", policy: tb(10, time.Second, 5), steps: []step{
			{at: 0, want: ok(4, 100*ms)},
			{at: 0, want: ok(3, 200*ms)},
			{at: 0, want: ok(2, 300*ms)},
			{at: 0, want: ok(1, 400*ms)},
			{at: 0, want: ok(0, 500*ms)},
			{at: 0, want: deny(0, 500*ms, 100*ms)},
			{at: 100 * ms, want: ok(0, 500*ms)},
			{at: 150 * ms, want: deny(0, 450*ms, 50*ms)},
			{at: 200 * ms, want: ok(0, 500*ms)},
			{at: 700 * ms, want: ok(4, 100*ms)},
			{at: 2000 * ms, cost: 5, want: ok(0, 500*ms)}, // cost == capacity
		}},
		// Burst 6 over a limit of 2/s: one token per 500ms.
		{name: "burst-above-limit", policy: tb(2, time.Second, 6), steps: []step{
			{at: 0, cost: 6, want: ok(0, 3000*ms)},
			{at: 0, want: deny(0, 3000*ms, 500*ms)},
			{at: 250 * ms, want: deny(0, 2750*ms, 250*ms)},
			{at: 500 * ms, want: ok(0, 3000*ms)},
			{at: 1000 * ms, cost: 2, want: deny(1, 2500*ms, 500*ms)}, // 1 token, 2 wanted
			{at: 1000 * ms, want: ok(0, 3000*ms)},
			{at: 4000 * ms, cost: 6, want: ok(0, 3000*ms)},
		}},
		// A rate that does not divide a second: one token per 333333.3µs.
		{name: "three-per-second", policy: tb(3, time.Second, 0), start: 250 * ms, steps: []step{
			{at: 0, want: ok(2, 334*ms)}, // 333333.3µs, rounded up
			{at: 0, want: ok(1, 667*ms)}, // 666666.7µs
			{at: 0, want: ok(0, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 334*ms)},
			// 0.999 tokens: 0.001 missing, 333.3µs; 2.001 to whole, 667ms.
			{at: 333 * ms, want: deny(0, 667*ms, 1*ms)},
			// 1.002 tokens, 0.002 left: 2.998 to whole, 999333.3µs.
			{at: 334 * ms, want: ok(0, 1000*ms)},
			// 0.002 + 0.766*3 = 2.3 tokens; 1.3 left: 1.7 to whole,
			// 566666.7µs.
			{at: 1100 * ms, want: ok(1, 567*ms)},
			// 0.7 missing: 233333.3µs.
			{at: 1100 * ms, cost: 2, want: deny(1, 567*ms, 234*ms)},
		}},
		{name: "weighted", policy: tb(10, time.Second, 0), steps: []step{
			{at: 0, cost: 5, want: ok(5, 500*ms)},
			{at: 0, cost: 4, want: ok(1, 900*ms)},
			{at: 0, cost: 2, want: deny(1, 900*ms, 100*ms)}, // 1 token, 2 wanted
			{at: 0, cost: 2, want: deny(1, 900*ms, 100*ms)},
			{at: 0, cost: 1, want: ok(0, 1000*ms)},
			{at: 50 * ms, want: deny(0, 950*ms, 50*ms)},
			{at: 300 * ms, cost: 3, want: ok(0, 1000*ms)},
			{at: 300 * ms, cost: 10, want: deny(0, 1000*ms, 1000*ms)}, // cost == capacity
			{at: 1300 * ms, cost: 10, want: ok(0, 1000*ms)},
		}},
		// One token per 500ms.
		{name: "isolation", policy: tb(2, time.Second, 0), steps: []step{
			{at: 0, want: ok(1, 500*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 0, want: deny(0, 1000*ms, 500*ms)},
			{at: 0, key: "other", want: ok(1, 500*ms)},
			{at: 0, name: "other-policy", want: ok(1, 500*ms)},
			{at: 0, key: "other", want: ok(0, 1000*ms)},
			{at: 0, key: "other", want: deny(0, 1000*ms, 500*ms)},
			{at: 0, want: deny(0, 1000*ms, 500*ms)},
		}},
		{name: "reset", policy: tb(2, time.Second, 0), steps: []step{
			{at: 0, want: ok(1, 500*ms)},
			{at: 0, want: ok(0, 1000*ms)},
			{at: 100 * ms, want: deny(0, 900*ms, 400*ms)}, // 0.2 tokens
			{at: 100 * ms, reset: true},
			{at: 100 * ms, want: ok(1, 500*ms)},
			{at: 100 * ms, want: ok(0, 1000*ms)},
			{at: 100 * ms, key: "never-seen", reset: true},
		}},
		// One token per 250ms.
		{name: "limiter", policy: tb(4, time.Second, 0), viaLimiter: true, steps: []step{
			{at: 0, want: ok(3, 250*ms)},
			{at: 0, cost: 3, want: ok(0, 1000*ms)},
			{at: 125 * ms, want: deny(0, 875*ms, 125*ms)}, // half a token
			{at: 125 * ms, reset: true},
			{at: 125 * ms, cost: 4, want: ok(0, 1000*ms)},
		}},
	}
}

// leakyBucketScripts: a queue of depth B drained at r = L/W. An admitted
// request waits Delay = level/r, the queue ahead of it; Remaining is the
// whole free places; ResetAfter is level/r; RetryAfter, (level+c-B)/r.
func leakyBucketScripts() []script {
	lb := func(limit int64, window time.Duration, burst int64) core.Policy {
		return policy(core.LeakyBucket, limit, window, burst)
	}
	return []script{
		// One unit leaves every 100ms: the burst of 5 leaves at 0, 100ms,
		// ..., 400ms.
		{name: "shapes-at-rate", policy: lb(10, time.Second, 5), steps: []step{
			{at: 0, want: queued(4, 100*ms, 0)},
			{at: 0, want: queued(3, 200*ms, 100*ms)},
			{at: 0, want: queued(2, 300*ms, 200*ms)},
			{at: 0, want: queued(1, 400*ms, 300*ms)},
			{at: 0, want: queued(0, 500*ms, 400*ms)},
			{at: 0, want: deny(0, 500*ms, 100*ms)},
			{at: 0, want: deny(0, 500*ms, 100*ms)},
			{at: 50 * ms, want: deny(0, 450*ms, 50*ms)}, // 4.5 queued
			{at: 99 * ms, want: deny(0, 401*ms, 1*ms)},  // 4.01 queued
			{at: 100 * ms, want: queued(0, 500*ms, 400*ms)},
			{at: 1000 * ms, want: queued(4, 100*ms, 0)}, // drained
		}},
		{name: "weighted", policy: lb(10, time.Second, 0), steps: []step{
			{at: 0, cost: 5, want: queued(5, 500*ms, 0)},
			{at: 0, cost: 4, want: queued(1, 900*ms, 500*ms)}, // behind 5 units
			{at: 0, cost: 2, want: deny(1, 900*ms, 100*ms)},   // 9+2-10 = 1 unit must leave
			{at: 0, cost: 2, want: deny(1, 900*ms, 100*ms)},
			{at: 0, cost: 1, want: queued(0, 1000*ms, 900*ms)},
			{at: 500 * ms, cost: 5, want: queued(0, 1000*ms, 500*ms)},
			{at: 500 * ms, cost: 10, want: deny(0, 1000*ms, 1000*ms)}, // cost == capacity
			{at: 1000 * ms, cost: 10, want: deny(5, 500*ms, 500*ms)},
			{at: 1500 * ms, cost: 10, want: queued(0, 1000*ms, 0)},
		}},
		// Burst 3 over a limit of 1/s: one unit leaves every second.
		{name: "burst-above-limit", policy: lb(1, time.Second, 3), steps: []step{
			{at: 0, want: queued(2, 1000*ms, 0)},
			{at: 0, want: queued(1, 2000*ms, 1000*ms)},
			{at: 0, want: queued(0, 3000*ms, 2000*ms)},
			{at: 0, want: deny(0, 3000*ms, 1000*ms)},
			{at: 500 * ms, want: deny(0, 2500*ms, 500*ms)},
			{at: 1000 * ms, want: queued(0, 3000*ms, 2000*ms)},
		}},
		// A rate that does not divide a second: one unit per 333333.3µs.
		{name: "three-per-second", policy: lb(3, time.Second, 0), steps: []step{
			{at: 0, want: queued(2, 334*ms, 0)},
			{at: 0, want: queued(1, 667*ms, 334*ms)},
			{at: 0, want: queued(0, 1000*ms, 667*ms)},
			{at: 0, want: deny(0, 1000*ms, 334*ms)},
			// 2.001 queued: 0.001 over, 333.3µs; 667ms to drain.
			{at: 333 * ms, want: deny(0, 667*ms, 1*ms)},
			// 1.998 queued: waits 666ms; 2.998 then, 999333.3µs to drain.
			{at: 334 * ms, want: queued(0, 1000*ms, 666*ms)},
		}},
		// One unit per 500ms.
		{name: "isolation", policy: lb(2, time.Second, 0), steps: []step{
			{at: 0, want: queued(1, 500*ms, 0)},
			{at: 0, want: queued(0, 1000*ms, 500*ms)},
			{at: 0, want: deny(0, 1000*ms, 500*ms)},
			{at: 0, key: "other", want: queued(1, 500*ms, 0)},
			{at: 0, name: "other-policy", want: queued(1, 500*ms, 0)},
			{at: 0, key: "other", want: queued(0, 1000*ms, 500*ms)},
			{at: 0, key: "other", want: deny(0, 1000*ms, 500*ms)},
			{at: 0, want: deny(0, 1000*ms, 500*ms)},
		}},
		{name: "reset", policy: lb(2, time.Second, 0), steps: []step{
			{at: 0, want: queued(1, 500*ms, 0)},
			{at: 0, want: queued(0, 1000*ms, 500*ms)},
			{at: 100 * ms, want: deny(0, 900*ms, 400*ms)}, // 1.8 queued
			{at: 100 * ms, reset: true},
			{at: 100 * ms, want: queued(1, 500*ms, 0)},
			{at: 100 * ms, want: queued(0, 1000*ms, 500*ms)},
			{at: 100 * ms, key: "never-seen", reset: true},
		}},
		// One unit per 250ms.
		{name: "limiter", policy: lb(4, time.Second, 0), viaLimiter: true, steps: []step{
			{at: 0, want: queued(3, 250*ms, 0)},
			{at: 0, cost: 3, want: queued(0, 1000*ms, 250*ms)},
			{at: 125 * ms, want: deny(0, 875*ms, 125*ms)}, // 3.5 queued
			{at: 125 * ms, reset: true},
			{at: 125 * ms, cost: 4, want: queued(0, 1000*ms, 0)},
		}},
	}
}
