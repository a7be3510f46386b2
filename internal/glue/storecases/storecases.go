// Package storecases holds the scripted cases of core/storetest's
// conformance suite as data, for the command's simulator to replay
// (cmd/ratelimit/internal/sim): the suite registers them here, so that its
// public surface stays Run and RunConcurrent.
package storecases

import (
	"time"

	"github.com/apigate/ratelimit/core"
)

// Epoch is the suite's time zero: midnight UTC on 1 January 2030, a
// boundary of every window the suite uses (windows are aligned to the Unix
// epoch). A Case's Start counts from it.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Cases returns every scripted case that storetest.Run plays, in the order
// it plays them; storetest sets it when it is linked in (import it, for
// its side effect if nothing else). The caller owns the slices returned.
var Cases func() []Case

// A Case is one scripted case of the suite, as Cases exports it: a policy
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
