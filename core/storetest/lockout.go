package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

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
