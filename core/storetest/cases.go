package storetest

import (
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/limits"
)

// A Case is one scripted case of the suite, as Cases exports it: a policy
// and the requests made under it, in order, each with the Decision it must
// get.
type Case struct {
	// Name names the case among those of its policy's algorithm; Run runs
	// it as the subtest Algorithm/Name.
	Name string
	// Policy is the case's policy, named as a Limiter names it
	// (Policy.DefaultName).
	Policy core.Policy
	// Start is the time of step zero, after Epoch: 0 starts on a boundary
	// of every window, anything else starts mid-window.
	Start time.Duration
	// ViaLimiter sends the steps through a core.Limiter (AllowNAt, at the
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

// Cases returns every scripted case that Run plays, in the order it plays
// them: by algorithm, in the order FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket, each algorithm's
// cases in their own order. They are converted from the suite's scripts on
// each call, so the caller owns the slices returned. Run's other checks
// (a clock that steps back, the ends of the valid range) and RunConcurrent
// are not scripted and are not among them.
func Cases() []Case {
	var out []Case
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		for _, s := range scripts(alg) {
			out = append(out, s.export())
		}
	}
	return out
}

// export converts s to the Case that Cases returns.
func (s *script) export() Case {
	c := Case{Name: s.name, Policy: s.policy, Start: s.start, ViaLimiter: s.viaLimiter, Steps: make([]Step, len(s.steps))}
	for i, st := range s.steps {
		c.Steps[i] = Step{At: st.at, Cost: st.cost, Key: st.key, PolicyName: st.name, Reset: st.reset, Want: st.want}
	}
	return c
}
