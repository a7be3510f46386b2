// Package storecasetest is the scripted cases of core/storetest's
// conformance suite, as data: a policy, the requests made under it, each
// with the Decision it must get, derived by hand from the semantics
// documented on the core.Algorithm constants. storetest.Run plays them
// against a store; the command's simulator test
// (cmd/ratelimit/internal/sim) replays them as traces. Cases and Of build
// them anew on each call, so the caller owns what they return.
package storecasetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Epoch is the suite's time zero: midnight UTC on 1 January 2030, a
// boundary of every window the suite uses (windows are aligned to the Unix
// epoch). A Case's Start counts from it.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Cases returns every scripted case, in the order storetest.Run plays
// them: by algorithm, in the order of limits.Algorithms (FixedWindow,
// SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket),
// each algorithm's cases in the order Of returns them. Run's other
// checks (a clock that steps back, the ends of the valid range) and
// storetest.RunConcurrent are not scripted and are not among them.
func Cases() []Case {
	var out []Case
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		out = append(out, Of(alg)...)
	}
	return out
}

// Of returns the scripted cases of alg, in the order storetest.Run plays
// them: the algorithm's own, then its lockouts (core.Policy.Lockout).
// An unknown algorithm has none.
func Of(alg core.Algorithm) []Case {
	var out []Case
	switch alg {
	case core.FixedWindow:
		out = fixedWindowCases()
	case core.SlidingWindowLog:
		out = slidingLogCases()
	case core.SlidingWindowCounter:
		out = slidingCounterCases()
	case core.TokenBucket:
		out = tokenBucketCases()
	case core.LeakyBucket:
		out = leakyBucketCases()
	default:
		return nil
	}
	return append(out, lockoutCases(alg)...)
}

// A Case is one scripted case of the suite: a policy
// and the requests made under it, in order, each with the Decision it must
// get.
type Case struct {
	// Name names the case among those of its policy's algorithm; storetest.Run runs
	// it as the subtest Algorithm/Name.
	Name string
	// Policy is the case's policy, named as a Limiter names it
	// (Policy.DefaultName).
	Policy core.Policy
	// Start is the time of step zero, after the suite's Epoch: 0 starts on a boundary
	// of every window, anything else starts mid-window.
	Start time.Duration
	// ViaLimiter sends the steps through a core.Limiter (AllowN, at the
	// step's time) instead of calling the store's Take and Reset directly.
	ViaLimiter bool
	// Steps are the case's requests and Resets, in the order made.
	Steps []Step
}

// A Step is one request, or one Reset, and what it must return.
type Step struct {
	// At is the step's time, after the case's Start.
	At time.Duration
	// Cost is the request's cost; 0 means 1.
	Cost int64
	// Key, when set, names a second client: the step uses the case's key
	// with Key appended (the suite appends "-" and Key to a key of its own
	// for the case). Steps with the same Key are the same client.
	Key string
	// PolicyName, when set, renames the policy: same client, another
	// policy (Policy with Name set to PolicyName, its other fields the
	// same).
	PolicyName string
	// Reset calls Reset instead of Take; Want is then ignored.
	Reset bool
	// Want is the Decision the store must return. Its Limit may be left 0:
	// it is then the policy's Capacity. The suite compares Allowed, Limit,
	// Remaining, ResetAfter, RetryAfter, Delay and LockedOut, wants
	// Shadowed false, and wants Source to be
	// core.SourceStore; Want leaves Source and Policy zero (through a
	// Limiter, the suite also wants the Limiter's Policy).
	Want core.Decision
}

// ok is an admitted request's Decision.
func ok(remaining int64, resetAfter time.Duration) core.Decision {
	return core.Decision{Allowed: true, Remaining: remaining, ResetAfter: resetAfter}
}

// queued is a Decision of the leaky bucket that admits the request after
// delay.
func queued(remaining int64, resetAfter, delay time.Duration) core.Decision {
	return core.Decision{Allowed: true, Remaining: remaining, ResetAfter: resetAfter, Delay: delay}
}

// deny is a denied request's Decision.
func deny(remaining int64, resetAfter, retryAfter time.Duration) core.Decision {
	return core.Decision{Remaining: remaining, ResetAfter: resetAfter, RetryAfter: retryAfter}
}

// policy returns the policy alg, limit per window, burst, named after its
// fields as a Limiter would name it.
func policy(alg core.Algorithm, limit int64, window time.Duration, burst int64) core.Policy {
	p := core.Policy{Algorithm: alg, Limit: limit, Window: window, Burst: burst}
	p.Name = limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)
	return p
}
