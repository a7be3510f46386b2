package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
	"github.com/apigate/ratelimit/internal/testkit/storecasetest"
)

// Units of the suite's times.
const (
	us = time.Microsecond
	ms = time.Millisecond
)

// The Decisions the cases want, as storecasetest makes them.
var (
	ok     = storecasetest.OK
	queued = storecasetest.Queued
	deny   = storecasetest.Deny
)

// playCase plays c against store, failing at the first step whose
// Decision is not the one wanted.
func playCase(t tester, c *storecasetest.Case, store core.Store, run string) {
	ctx := context.Background()
	t0 := epoch().Add(c.Start)
	limiters := map[string]*core.Limiter{}
	for i, st := range c.Steps {
		key := run + "-" + string(c.Policy.Algorithm) + "-" + c.Name
		if st.Key != "" {
			key += "-" + st.Key
		}
		p := c.Policy
		if st.PolicyName != "" {
			p.Name = st.PolicyName
		}
		cost := st.Cost
		if cost == 0 {
			cost = 1
		}
		now := t0.Add(st.At)
		where := fmt.Sprintf("step %d (at %v, cost %d, key %q, policy %q)", i, st.At, cost, key, p.Name)

		var l *core.Limiter
		if c.ViaLimiter {
			if l = limiters[p.Name]; l == nil {
				var err error
				l, err = core.NewLimiter(store, []core.Policy{p})
				if err != nil {
					t.Fatalf("%s: NewLimiter: %v", where, err)
				}
				limiters[p.Name] = l
			}
		}

		if st.Reset {
			var err error
			if l != nil {
				err = l.Reset(ctx, key)
			} else {
				err = store.Reset(ctx, key, p)
			}
			if err != nil {
				t.Fatalf("%s: Reset: %v", where, err)
			}
			continue
		}

		want := st.Want
		if want.Limit == 0 {
			want.Limit = limits.Capacity(p.Algorithm, p.Limit, p.Burst)
		}
		checkPeek(t, store, l, key, p, cost, now, want, where)
		var got core.Decision
		var err error
		if l != nil {
			got, err = l.AllowN(ctx, key, cost, now)
			want.Policy = l.Policies()[0]
		} else {
			got, _, err = storecall.Take(store, ctx, now, core.Request{Key: key, Policy: p, Cost: cost})
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if !sameDecision(got, want, l != nil) {
			t.Fatalf("%s:\n got %s\nwant %s", where, show(got), show(want))
		}
	}
}

// sameDecision compares the fields a store decides; withPolicy adds the
// Policy, which only a Limiter fills in.
func sameDecision(got, want core.Decision, withPolicy bool) bool {
	if withPolicy && got.Policy != want.Policy {
		return false
	}
	return got.Allowed == want.Allowed &&
		got.Limit == want.Limit &&
		got.Remaining == want.Remaining &&
		got.ResetAfter == want.ResetAfter &&
		got.RetryAfter == want.RetryAfter &&
		got.Delay == want.Delay &&
		got.LockedOut == want.LockedOut &&
		!got.Shadowed &&
		got.Source == core.SourceStore
}

// show formats the fields of d that sameDecision compares.
func show(d core.Decision) string {
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	out := fmt.Sprintf("{%s limit=%d remaining=%d reset=%v retry=%v delay=%v", verdict, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay)
	if d.LockedOut {
		out += " locked-out"
	}
	if d.Shadowed {
		out += " shadowed"
	}
	if d.Source != core.SourceStore {
		out += " source=" + d.Source.String()
	}
	if d.Policy != (core.Policy{}) {
		out += fmt.Sprintf(" policy=%q", d.Policy.Name)
	}
	return out + "}"
}

// checkPeek peeks (Store.Peek, or Limiter.Peek when l is set) at
// key under p at now, just before the step that wants want, and fails
// unless the peek tells what the step's decision says of the state before
// it: the Remaining and ResetAfter a denial reports, the Remaining an
// admission leaves plus its cost, and, for a step of cost 1, whether it
// passes, its RetryAfter and Delay. The case's later steps then check
// that the peek wrote nothing: each still gets its Decision.
func checkPeek(t tester, store core.Store, l *core.Limiter, key string, p core.Policy, cost int64, now time.Time, want core.Decision, where string) {
	t.Helper()
	var got core.Decision
	var err error
	if l != nil {
		out := make([]core.Decision, 1)
		err = l.Peek(context.Background(), now, []core.Request{{Key: key}}, out)
		got = out[0]
		if err == nil && got.Policy != l.Policies()[0] {
			t.Fatalf("%s: peek: policy %q, want %q", where, got.Policy.Name, l.Policies()[0].Name)
		}
	} else {
		got, err = storecall.Peek(store, context.Background(), now, core.Request{Key: key, Policy: p})
	}
	if err != nil {
		t.Fatalf("%s: peek: %v", where, err)
	}
	bad := got.Limit != want.Limit || got.Shadowed || got.Source != core.SourceStore
	switch {
	case got.LockedOut:
		// A lockout in force: the step is denied by it alike.
		bad = bad || got.Allowed || !want.LockedOut || got.Remaining != want.Remaining ||
			got.ResetAfter != want.ResetAfter || got.RetryAfter != want.RetryAfter
	case want.LockedOut:
		// The step's denial starts a lockout, which the peek does not.
		bad = bad || cost == 1 && got.Allowed
	case !want.Allowed:
		bad = bad || got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter ||
			cost == 1 && (got.Allowed || got.RetryAfter != want.RetryAfter)
	default:
		bad = bad || got.Remaining != want.Remaining+cost ||
			cost == 1 && (!got.Allowed || got.Delay != want.Delay || got.RetryAfter != 0)
	}
	if bad {
		t.Fatalf("%s: the peek before it:\n got %s\nstep %s", where, show(got), show(want))
	}
}
