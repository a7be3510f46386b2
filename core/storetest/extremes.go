package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// extremeWindows run from 1 ms to 366 days, some of them
// not a whole number of milliseconds.
var extremeWindows = []time.Duration{
	limits.MinWindow,
	3*ms + 7*us,
	time.Second,
	time.Minute + us,
	time.Hour,
	24 * time.Hour,
	limits.MaxWindow,
}

// extremeLimits are where float64 loses the small terms: the ulp of 1e12
// is 2^-13, a sliver of one request that a long window takes hours to
// decay by.
var extremeLimits = []int64{1_000_000_000, limits.MaxLimit}

// A take is one request of an extreme case, at a time after the case's
// start, a boundary of its window.
type take struct {
	at   time.Duration
	cost int64
}

// An extremeCase is setup requests, which must pass, then a probe, which
// must be denied.
type extremeCase struct {
	name   string
	policy core.Policy
	setup  []take
	probe  take
}

// testExtremes checks RetryAfter at the ends of the valid range: limits of
// 1e9 and 10^12, windows from 1 ms to 366 days,
// costs of 1 and the whole capacity, and for the buckets the deepest
// bucket at the slowest rate a policy may have. Each case's probe is
// denied with some RetryAfter R; the same request must still be denied at
// R-1ms and pass at R: RetryAfter is the first moment at which the store
// admits the request, rounded up to the millisecond, not a formula that
// rounding made late or early.
func testExtremes(t tester, store core.Store, run string, alg core.Algorithm) {
	for _, c := range extremeCases(alg) {
		t.run(c.name, func(t tester) {
			c.check(t, store, run+"-extreme-"+string(alg)+"-"+c.name)
		})
	}
}

// check plays c on store under key.
func (c *extremeCase) check(t tester, store core.Store, key string) {
	t.Helper()
	ctx := context.Background()
	p := c.policy
	w := p.Window.Microseconds()
	// The first boundary of the window after the suite's epoch.
	e := epoch().UnixMicro()
	start := time.UnixMicro(e - e%w + w).UTC()
	decide := func(at time.Duration, cost int64) core.Decision {
		t.Helper()
		d, _, err := storecall.Take(store, ctx, start.Add(at), core.Request{Key: key, Policy: p, Cost: cost})
		if err != nil {
			t.Fatalf("%s: cost %d at start+%v: %v", p.Name, cost, at, err)
		}
		return d
	}
	for _, s := range c.setup {
		if d := decide(s.at, s.cost); !d.Allowed {
			t.Fatalf("%s: setup request of cost %d at start+%v: got %s, want allowed", p.Name, s.cost, s.at, show(d))
		}
	}
	pr := c.probe
	d := decide(pr.at, pr.cost)
	where := fmt.Sprintf("%s: probe of cost %d at start+%v", p.Name, pr.cost, pr.at)
	if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter%ms != 0 {
		t.Fatalf("%s: got %s, want denied with a RetryAfter of whole milliseconds", where, show(d))
	}
	retry := d.RetryAfter
	if early := decide(pr.at+retry-ms, pr.cost); early.Allowed {
		t.Errorf("%s: denied, retry after %v; admitted 1ms before that (%s): RetryAfter is late", where, retry, show(early))
		return
	}
	if at := decide(pr.at+retry, pr.cost); !at.Allowed {
		t.Errorf("%s: denied, retry after %v; denied again then (%s): RetryAfter is early", where, retry, show(at))
		return
	}
	// Leave nothing behind for a year in a shared backend.
	if err := store.Reset(ctx, key, p); err != nil {
		t.Errorf("%s: Reset: %v", p.Name, err)
	}
}

// extremeCases returns the extreme cases of alg, which is not the sliding
// log (its limit stays at or below 100,000).
func extremeCases(alg core.Algorithm) []extremeCase {
	var cases []extremeCase
	add := func(name string, p core.Policy, probe take, setup ...take) {
		cases = append(cases, extremeCase{
			name:   fmt.Sprintf("%s-L%d-B%d-W%v", name, p.Limit, p.Burst, p.Window),
			policy: p, setup: setup, probe: probe,
		})
	}
	for _, w := range extremeWindows {
		third := (w / 3).Truncate(us)
		for _, l := range extremeLimits {
			p := policy(alg, l, w, 0)
			switch alg {
			case core.FixedWindow:
				add("full", p, take{third, 1}, take{0, l})
				add("cost-limit", p, take{third, l}, take{0, 1})
			case core.SlidingWindowCounter:
				// 3 in the previous window, which still weighs 3 at the
				// start of this one, and l-3 in this one: a request of 1
				// waits for the weight to fall to 2, as the sum
				// prev*(w-el)/w + (l-3) rounds to the ulp of l.
				add("previous-weighs", p, take{w, 1}, take{0, 3}, take{w, l - 3})
				// l in this window: a request waits into the next one.
				add("own-count", p, take{third, 1}, take{0, l})
				// 1 in the previous window: a request of l waits until
				// its weight no longer counts, which rounding hastens.
				add("previous-weighs-cost-limit", p, take{w, l}, take{0, 1})
				add("previous-full-cost-limit", p, take{w + third, l}, take{0, l})
				add("own-count-cost-limit", p, take{third, l}, take{0, 1})
			default: // the buckets
				bucketCases(add, p)
			}
		}
		if limits.IsBucket(alg) {
			// The deepest bucket at the slowest rate Validate accepts:
			// 10^12 refilled in 366 days.
			bucketCases(add, slowestRefill(alg, w))
		}
	}
	return cases
}

// bucketCases adds the cases of the bucket policy p, whose capacity is b.
func bucketCases(add func(string, core.Policy, take, ...take), p core.Policy) {
	b := limits.Capacity(p.Algorithm, p.Limit, p.Burst)
	third := (p.Window / 3).Truncate(us)
	add("empty", p, take{0, 1}, take{0, b})
	add("one-short-cost-capacity", p, take{0, b}, take{0, 1})
	add("partly-refilled-cost-capacity", p, take{third, b}, take{0, b})
}

// slowestRefill is the bucket of 10^12 with the smallest limit per
// w that Validate accepts: it fills from empty in 366 days.
func slowestRefill(alg core.Algorithm, w time.Duration) core.Policy {
	l := max(1, int64(float64(limits.MaxLimit)*float64(w.Microseconds())/float64(limits.MaxWindow.Microseconds())))
	for policy(alg, l, w, limits.MaxLimit).Validate() != nil {
		l++
	}
	return policy(alg, l, w, limits.MaxLimit)
}
