package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// testStepBack sends requests whose time steps back: concurrent requests
// read the clock in one order and reach the store in the other, a wall
// clock is corrected, a Redis failover lands on a host whose clock is
// behind. The store must not panic, must not admit more than the limit,
// and must recover.
//
// Under 10 per second, 9 requests pass at t1, then 10 are tried at t1-back,
// then 10 more at t1 again. Whatever passes at t1-back, at most one more may
// pass at t1: the window holding t1 (fixed window, sliding counter), the
// sliding window (t1-W, t1] and the bucket at the instant t1 each hold at
// most 10. When back is shorter than the window, the sliding window and
// the buckets (at most B + r*back = 10.2 in any span of 20ms) hold at most
// 10 of all the requests together.
func testStepBack(t tester, store core.Store, run string, alg core.Algorithm) {
	p := policy(alg, 10, time.Second, 0)
	for _, tc := range []struct {
		name     string
		t1, back time.Duration
	}{
		{name: "20ms-across-an-edge", t1: 1010 * ms, back: 20 * ms},
		{name: "a-whole-window", t1: 1500 * ms, back: time.Second},
	} {
		t.run(tc.name, func(t tester) {
			key := run + "-" + string(alg) + "-step-back-" + tc.name
			take := func(at time.Duration, n int) int {
				t.Helper()
				admitted := 0
				for range n {
					req := core.Request{Key: key, Policy: p, Cost: 1}
					d, _, err := storecall.Take(store, context.Background(), epoch().Add(at), req)
					if err != nil {
						t.Fatalf("at %v: %v", at, err)
					}
					if err := sane(d, p); err != nil {
						t.Fatalf("at %v: %v", at, err)
					}
					if d.Allowed {
						admitted++
					}
				}
				return admitted
			}
			t0 := tc.t1 - tc.back
			if a1 := take(tc.t1, 9); a1 != 9 {
				t.Fatalf("admitted %d of 9 requests at %v, want all", a1, tc.t1)
			}
			a2 := take(t0, 10)
			a3 := take(tc.t1, 10)
			history := fmt.Sprintf("9 admitted at %v, then %d of 10 at %v, then %d of 10 at %v", tc.t1, a2, t0, a3, tc.t1)
			if 9+a3 > 10 {
				t.Errorf("%s: %d admitted at %v, want at most 10", history, 9+a3, tc.t1)
			}
			if tc.back < p.Window && alg != core.FixedWindow && 9+a2+a3 > 10 {
				t.Errorf("%s: %d admitted within %v, want at most 10", history, 9+a2+a3, tc.back)
			}
			// Ten windows later, everything is forgotten.
			if a := take(tc.t1+10*time.Second, 1); a != 1 {
				t.Errorf("%s: a request 10s later is denied, want allowed", history)
			}
		})
	}
}

// sane reports a Decision out of the ranges every Decision stays in under
// p, a policy whose bucket, if any, is no deeper than its limit.
func sane(d core.Decision, p core.Policy) error {
	switch {
	case d.Limit != limits.Capacity(p.Algorithm, p.Limit, p.Burst):
		return fmt.Errorf("%s: Limit is not the capacity, %d", show(d), limits.Capacity(p.Algorithm, p.Limit, p.Burst))
	case d.Remaining < 0 || d.Remaining > d.Limit:
		return fmt.Errorf("%s: Remaining out of [0, Limit]", show(d))
	case d.ResetAfter < 0 || d.ResetAfter > 2*p.Window:
		return fmt.Errorf("%s: ResetAfter out of [0, 2*Window]", show(d))
	case d.Allowed && d.RetryAfter != 0:
		return fmt.Errorf("%s: RetryAfter set on an allowed request", show(d))
	case !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 2*p.Window):
		return fmt.Errorf("%s: RetryAfter out of (0, 2*Window]", show(d))
	case d.Delay < 0 || d.Delay > p.Window || d.Delay != 0 && (!d.Allowed || p.Algorithm != core.LeakyBucket):
		return fmt.Errorf("%s: Delay out of place", show(d))
	}
	return nil
}
