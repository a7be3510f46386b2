package storetest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// runPlans checks that a client moved between plans keeps its usage, under
// every algorithm. A plan is a policy of the same Name, Algorithm and
// Window under another Limit (and so, with Burst 0, another bucket
// capacity): the state of a client key under a policy is keyed by its Name
// and Algorithm, so every plan reads and writes the same usage. A client
// that used 900 of a 1,000-per-minute plan and is moved to a 500 plan is
// denied, with Remaining 0 (never below), until its usage has fallen below
// 500, and its RetryAfter is exact: denied 1ms (and, where the suite's
// times make it fall on a microsecond, 1µs) before, admitted at it. Moved
// to 10,000 it has the room at once: Remaining 10,000-901. Moving back and
// forth keeps the usage. A cost above the plan's capacity is the caller's
// error (an invalid request, core.ErrInvalidOption), which the store
// returns, changing nothing.
//
// What the usage is, per algorithm: the window algorithms count the units
// admitted in their windows, whatever the plan that admitted them, and a
// plan compares that count with its own Limit. The buckets keep their
// level, the units used (tokens taken, units queued), which drains at the
// rate of the plan in force, Limit per Window, over all the time since the
// last admission: a request passes when level + cost <= the plan's
// capacity; Remaining is the capacity less the level, at least 0;
// ResetAfter the time the level takes to drain at the plan's rate.
//
// Usage is forgotten, at the latest, when the plan that last admitted it
// would have forgotten it: for the buckets, when the level it left would
// have drained at that plan's rate (the memory store's expiry of the
// state, the Redis key's TTL, both set by that admission). Under a plan
// that drains the usage more slowly, it may so be forgotten before it has
// drained at the slower rate; a RetryAfter is then the earlier of the two
// moments. The memory store forgets it at that expiry to the microsecond;
// the Redis store by the key's TTL, which is rounded up to the millisecond
// and, for a request at an explicit time (Take's now), at least a minute
// of Redis's own time (so that a test's time far from Redis's does not
// expire the key at once): with explicit times it keeps such usage until
// it has drained at the slower plan's rate. The cases here never ask, under
// a plan that drains more slowly, for usage past the expiry that the last
// admission set; every other Decision is the same on every store.
//
// Every request carries Now; the keys start with a prefix drawn at random
// for each call, so newStore may return the same store every time. Run
// calls runPlans.
func runPlans(t tester, newStore func(t tester) core.Store) {
	run := runID(t)
	t.run("plans", func(t tester) {
		for _, alg := range limits.Algorithms[core.Algorithm]() {
			t.run(string(alg), func(t tester) {
				playPlans(t, newStore(t), run+"-plans-"+string(alg), alg, planSteps(alg))
			})
			if limits.IsBucket(alg) {
				t.run(string(alg)+"/cliff", func(t tester) {
					testPlanCliff(t, newStore(t), run+"-cliff-"+string(alg), alg)
				})
			}
		}
	})
}

// cliffHorizon is the longest ResetAfter or RetryAfter a store returns for
// a bucket: 2^52 µs (about 142 years), rounded up to the millisecond.
const cliffHorizon = 4503599627371 * time.Millisecond

// testPlanCliff: a bucket filled under a fast plan, then decided under one
// ten million times slower (an override that cuts 10,000,000 an hour to 1
// an hour, an emergency block), holds over a thousand years of usage. The
// store must still answer at once, and deny: ResetAfter and RetryAfter
// bounded by cliffHorizon, never negative (an overflowed Duration), never
// an error. Over Redis, a search that cannot end there would block the
// whole server.
func testPlanCliff(t tester, store core.Store, key string, alg core.Algorithm) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(30*time.Second))
	defer cancel()
	now := epoch().Add(time.Hour)
	for _, fast := range []int64{10_000_000, 1_000_000} {
		k := fmt.Sprintf("%s-%d", key, fast)
		p := core.Policy{Name: "cliff", Algorithm: alg, Limit: fast, Window: time.Hour}
		d, _, err := storecall.Take(store, ctx, now, core.Request{Key: k, Policy: p, Cost: fast})
		if err != nil || !d.Allowed {
			t.Fatalf("%d an hour, cost %d: got %s, %v; want it admitted", fast, fast, show(d), err)
		}
		p.Limit = 1
		for i, at := range []time.Duration{0, time.Minute} {
			d, _, err = storecall.Take(store, ctx, now.Add(at), core.Request{Key: k, Policy: p, Cost: 1})
			where := fmt.Sprintf("%d an hour, then 1 an hour, %v later (request %d)", fast, at, i)
			switch {
			case err != nil:
				t.Fatalf("%s: %v", where, err)
			case d.Allowed:
				t.Errorf("%s: admitted: %s", where, show(d))
			case d.RetryAfter <= 0 || d.RetryAfter > cliffHorizon:
				t.Errorf("%s: RetryAfter %v, want in (0, %v]", where, d.RetryAfter, cliffHorizon)
			case d.ResetAfter < d.RetryAfter || d.ResetAfter > cliffHorizon:
				t.Errorf("%s: ResetAfter %v, want in [RetryAfter %v, %v]", where, d.ResetAfter, d.RetryAfter, cliffHorizon)
			}
		}
	}
}

// planWindow is the Window of every plan.
const planWindow = time.Minute

// planPolicy is the plan of alg with limit per planWindow, and Burst 0:
// the buckets' capacity is the limit.
func planPolicy(alg core.Algorithm, limit int64) core.Policy {
	return core.Policy{Name: "plan", Algorithm: alg, Limit: limit, Window: planWindow}
}

// A planStep is one request, under the plan of limit, and what it must
// return.
type planStep struct {
	at    time.Duration // after the suite's epoch, a boundary of the window
	limit int64
	cost  int64 // 0 means 1
	// want is the Decision; its Limit is left 0, meaning the plan's.
	want core.Decision
	// err, when set, is the error Take must return (errors.Is).
	err error
}

// playPlans plays steps under key on store, and checks each Decision,
// and for each denial that the request is still denied 1ms before its
// RetryAfter and admitted at it, on a fresh key that replays the steps
// before it.
func playPlans(t tester, store core.Store, key string, alg core.Algorithm, steps []planStep) {
	t.Helper()
	ctx := context.Background()
	take := func(key string, s planStep, at time.Duration) (core.Decision, error) {
		cost := s.cost
		if cost == 0 {
			cost = 1
		}
		d, _, err := storecall.Take(store, ctx, epoch().Add(at), core.Request{Key: key, Policy: planPolicy(alg, s.limit), Cost: cost})
		return d, err
	}
	// replay takes steps[:i] under a key of its own, named after what.
	replay := func(i int, what string) string {
		t.Helper()
		k := fmt.Sprintf("%s-%s-%d", key, what, i)
		for j, s := range steps[:i] {
			if s.err != nil {
				continue
			}
			if _, err := take(k, s, s.at); err != nil {
				t.Fatalf("replaying step %d under %s: %v", j, k, err)
			}
		}
		return k
	}
	for i, s := range steps {
		where := fmt.Sprintf("step %d (at %v, cost %d, plan %d per %v)", i, s.at, max(s.cost, 1), s.limit, planWindow)
		got, err := take(key, s, s.at)
		if s.err != nil {
			if !errors.Is(err, s.err) {
				t.Fatalf("%s: got %s, %v; want the error %v", where, show(got), err, s.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		want := s.want
		want.Limit = s.limit
		if !sameDecision(got, want, false) {
			t.Fatalf("%s:\n got %s\nwant %s", where, show(got), show(want))
		}
		if got.Allowed {
			continue
		}
		retry := got.RetryAfter
		if retry <= 0 {
			t.Fatalf("%s: denied with RetryAfter %v", where, retry)
		}
		if early, err := take(replay(i, "early"), s, s.at+retry-ms); err != nil || early.Allowed {
			t.Errorf("%s: denied, retry after %v; 1ms before that: %s, %v: RetryAfter is late", where, retry, show(early), err)
		}
		if then, err := take(replay(i, "then"), s, s.at+retry); err != nil || !then.Allowed {
			t.Errorf("%s: denied, retry after %v; then: %s, %v: RetryAfter is early", where, retry, show(then), err)
		}
	}
	// Leave nothing behind in a shared backend.
	if err := store.Reset(ctx, key, planPolicy(alg, 1000)); err != nil {
		t.Errorf("Reset: %v", err)
	}
}

// planSteps returns the steps of alg: 900 used of 1,000 per minute, then
// moves between plans of 500, 1,000 and 10,000 per minute.
func planSteps(alg core.Algorithm) []planStep {
	switch alg {
	case core.FixedWindow:
		return fixedWindowPlans()
	case core.SlidingWindowLog:
		return slidingLogPlans()
	case core.SlidingWindowCounter:
		return slidingCounterPlans()
	case core.TokenBucket:
		return bucketPlans(false)
	case core.LeakyBucket:
		return bucketPlans(true)
	}
	return nil
}

// fixedWindowPlans: the count of the window [0, 1m) is the usage; a
// denial waits for the window's end, whatever the plan.
func fixedWindowPlans() []planStep {
	return []planStep{
		{at: 0, limit: 1000, cost: 900, want: ok(100, 60*time.Second)},
		{at: 10 * time.Second, limit: 500, want: deny(0, 50*time.Second, 50*time.Second)}, // 900 > 500
		{at: 10 * time.Second, limit: 500, cost: 600, err: core.ErrInvalidOption},
		{at: 10 * time.Second, limit: 10000, want: ok(9099, 50*time.Second)},
		{at: 20 * time.Second, limit: 500, want: deny(0, 40*time.Second, 40*time.Second)},
		{at: 20 * time.Second, limit: 1000, cost: 99, want: ok(0, 40*time.Second)}, // 901 + 99
		{at: 20 * time.Second, limit: 1000, want: deny(0, 40*time.Second, 40*time.Second)},
		{at: 20 * time.Second, limit: 10000, want: ok(8999, 40*time.Second)},
		// 1,001 counted, more than 1,000: Remaining is 0, not -1.
		{at: 30 * time.Second, limit: 1000, want: deny(0, 30*time.Second, 30*time.Second)},
		{at: time.Minute - us, limit: 500, want: deny(0, ms, ms)},
		{at: time.Minute, limit: 500, want: ok(499, time.Minute)},
	}
}

// slidingLogPlans: 100 units a second from 0 to 8s; the units in the
// sliding minute are the usage. Under a plan of l, n units logged and a
// request of c, the (n+c-l)-th oldest unit must leave first.
func slidingLogPlans() []planStep {
	var steps []planStep
	for k := range int64(9) {
		steps = append(steps, planStep{at: time.Duration(k) * time.Second, limit: 1000, cost: 100, want: ok(900-100*k, time.Minute)})
	}
	return append(steps, []planStep{
		// 900 logged; the 401st unit, of 4s, must leave: at 1m4s.
		{at: 10 * time.Second, limit: 500, want: deny(0, 58*time.Second, 54*time.Second)},
		{at: 10 * time.Second, limit: 500, cost: 600, err: core.ErrInvalidOption},
		{at: 10 * time.Second, limit: 10000, want: ok(9099, time.Minute)},
		{at: 10 * time.Second, limit: 1000, cost: 99, want: ok(0, time.Minute)},
		// 1,000 logged: the first unit, of 0s, must leave.
		{at: 10 * time.Second, limit: 1000, want: deny(0, time.Minute, 50*time.Second)},
		// The 501st unit, of 5s, must leave: at 1m5s.
		{at: 10 * time.Second, limit: 500, want: deny(0, time.Minute, 55*time.Second)},
		// Those of 0s to 4s have left: 500 logged, the first of 5s must
		// leave.
		{at: 64 * time.Second, limit: 500, want: deny(0, 6*time.Second, time.Second)},
		{at: 65*time.Second - us, limit: 500, want: deny(0, 5*time.Second+ms, ms)},
		{at: 65 * time.Second, limit: 500, want: ok(99, time.Minute)},
	}...)
}

// slidingCounterPlans: this window's count and the previous one's, weighed,
// are the usage.
func slidingCounterPlans() []planStep {
	return []planStep{
		{at: 0, limit: 1000, cost: 900, want: ok(100, 2*time.Minute)},
		// 900 in this window: wait into the next, until 900*(60s-el)/60s
		// + 1 <= 500, el >= 26.7333334s: 1m26.7333334s.
		{at: 10 * time.Second, limit: 500, want: deny(0, 110*time.Second, 76734*ms)},
		{at: 10 * time.Second, limit: 500, cost: 600, err: core.ErrInvalidOption},
		{at: 10 * time.Second, limit: 10000, want: ok(9099, 110*time.Second)},
		{at: 10 * time.Second, limit: 1000, cost: 99, want: ok(0, 110*time.Second)},
		// 1,000: wait until 1000*(60s-el)/60s + 1 <= 1000, el >= 60ms.
		{at: 10 * time.Second, limit: 1000, want: deny(0, 110*time.Second, 50060*ms)},
		// 10s into the next window the previous 1,000 weigh 833.3: wait
		// until 1000*(60s-el)/60s + 1 <= 500, el >= 30.06s.
		{at: 70 * time.Second, limit: 500, want: deny(0, 50*time.Second, 20060*ms)},
		{at: 90060*ms - us, limit: 500, want: deny(0, 29941*ms, ms)},
		{at: 90060 * ms, limit: 500, want: ok(0, 89940*ms)}, // 499 + 1
		// 333.3 + 1, and 1 more.
		{at: 100 * time.Second, limit: 10000, want: ok(9664, 80*time.Second)},
		{at: 100 * time.Second, limit: 500, want: ok(163, 80*time.Second)},
	}
}

// bucketPlans: the level, the units used, drains at the rate of the plan
// in force: 1 unit per 60ms at 1,000 per minute, per 120ms at 500, per 6ms
// at 10,000. shape adds the leaky bucket's Delay, the level ahead of an
// admitted request at the plan's rate.
func bucketPlans(shape bool) []planStep {
	admit := func(remaining int64, reset, delay time.Duration) core.Decision {
		if !shape {
			delay = 0
		}
		return queued(remaining, reset, delay)
	}
	return []planStep{
		{at: 0, limit: 1000, cost: 900, want: admit(100, 54*time.Second, 0)},
		// 900 used: 401 must drain at 500 per minute, 48.12s; 900 drain
		// in 108s.
		{at: 0, limit: 500, want: deny(0, 108*time.Second, 48120*ms)},
		{at: 0, limit: 500, cost: 600, err: core.ErrInvalidOption},
		{at: 0, limit: 10000, want: admit(9099, 5406*ms, 5400*ms)},
		// 901 used: 21 must drain at 1,000 per minute.
		{at: 0, limit: 1000, cost: 120, want: deny(99, 54060*ms, 1260*ms)},
		// 1.2s drain 200 at 10,000 per minute: 701 used, 702 then.
		{at: 1200 * ms, limit: 10000, want: admit(9298, 4212*ms, 4206*ms)},
		{at: 1200 * ms, limit: 1000, want: admit(297, 42180*ms, 42120*ms)},
		// 703 used: 204 must drain at 500 per minute, 24.48s.
		{at: 1200 * ms, limit: 500, want: deny(0, 84360*ms, 24480*ms)},
		{at: 25680*ms - us, limit: 500, want: deny(0, 59881*ms, ms)},
		{at: 25680 * ms, limit: 500, want: admit(0, time.Minute, 59880*ms)}, // 499 + 1
		{at: 25680 * ms, limit: 10000, want: admit(9499, 3006*ms, 3000*ms)},
	}
}
