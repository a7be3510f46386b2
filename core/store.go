package core

import (
	"context"
	"fmt"
	"time"
)

// Decision is the answer to one request: may it pass, and what to tell the
// client. Durations are whole milliseconds, rounded up. (Its one-byte
// fields come first and share one word, so that it copies cheaply.)
type Decision struct {
	// Allowed reports whether the request may pass.
	Allowed bool
	// Source says where the decision came from: the store, unless the
	// store failed or was not asked.
	Source Source
	// LockedOut reports a request denied by the policy's Lockout: the one
	// that started a lockout, and every request during it. RetryAfter is
	// then the time left on the lockout, and Remaining 0.
	LockedOut bool
	// Shadowed reports a request that the Limiter admitted only because it
	// is in shadow mode (WithShadow): it would have been denied. Allowed
	// is then true, and the other fields are those of the denial.
	Shadowed bool
	// Limit is the policy's Capacity: the most Remaining can ever be.
	Limit int64
	// Remaining is how many more cost units would pass right now.
	Remaining int64
	// ResetAfter is the time until the quota is whole again (Remaining ==
	// Limit); 0 when it already is.
	ResetAfter time.Duration
	// RetryAfter is 0 when Allowed; otherwise the earliest time after which
	// the same request (same cost) would pass, had nothing else happened.
	RetryAfter time.Duration
	// Delay is set by LeakyBucket on admitted requests: how long the request
	// should wait before it proceeds, so that admitted requests leave at the
	// policy's steady rate. 0 for every other algorithm.
	Delay time.Duration
	// Policy is the policy that decided, with its Name filled in: the
	// layer's, as a PolicySource adjusted it.
	Policy Policy
	// Err says why the store did not decide: its failure or timeout
	// (errors.Is(Err, context.DeadlineExceeded) for a timeout), its open
	// circuit breaker, or a PolicySource's failure. It is set only with
	// Source SourceFallback or SourceFailMode, for the caller to log; the
	// call's own error is then nil, since a decision was made. A Store
	// leaves it nil but in a failed Take (see Store.Take).
	Err error
}

// Request is a client key under a policy, for a cost: one layer's part of
// a request to Limiter.AllowLayers, Peek and Refund (reqs[i] for layer i,
// its Policy ignored), and one question a Limiter asks its Store.
type Request struct {
	// Key identifies the client; an empty Key leaves the layer out of
	// AllowLayers, Peek and Refund. A Store gets it checked: never empty,
	// at most 128 bytes of printable ASCII with no '{' or '}'.
	Key string
	// Policy is the policy the Store decides by: validated, with an
	// Algorithm and a Name.
	Policy Policy
	// Cost is the units the request takes (Store.Take) or gives back
	// (Store.Refund): in [1, the policy's capacity] (Burst for the
	// buckets, or Limit). A Limiter's peek asks for 1.
	Cost int64

	// _ keeps a Request 128 bytes, a multiple of 16: see Policy's.
	_ [8]byte
}

// Validate reports whether r keeps the contract on Request: a key, a
// valid policy with its Algorithm filled in (a Store never gets the
// empty default) and a cost in [1, the policy's capacity]; its error wraps
// ErrInvalidOption. A Limiter sends no request that Validate refuses, but
// a store is called directly too (tests, tools): every Store refuses such
// a request with this error, or one alike, and never panics on it.
func (r *Request) Validate() error {
	if r.Key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidOption)
	}
	if r.Policy.Algorithm == "" {
		return fmt.Errorf("%w: policy %q has an empty algorithm: a Store gets policies as the Limiter filled them in (Limiter.Policies), the default %s written out", ErrInvalidOption, r.Policy.Name, SlidingWindowCounter)
	}
	if err := r.Policy.Validate(); err != nil {
		return err
	}
	if c := r.Policy.capacity(); r.Cost < 1 || r.Cost > c {
		return fmt.Errorf("%w: cost %d, capacity %d", ErrInvalidOption, r.Cost, c)
	}
	return nil
}

// Source says where a Decision came from.
type Source uint8

const (
	// SourceStore: the Limiter's store decided. It is the zero value, and
	// the only Source a Store returns.
	SourceStore Source = iota
	// SourceFallback: the Limiter's fallback store decided (WithFallback),
	// from this process's counts alone, because the store failed or its
	// circuit breaker is open (Err says which); or, while the Limiter is
	// Recovering, the fallback refused a request the store admitted (Err
	// nil).
	SourceFallback
	// SourceDenyCache: a denial answered from the Limiter's deny cache
	// (WithDenyCache), without asking the store.
	SourceDenyCache
	// SourceFailMode: the store failed or was not asked (open circuit
	// breaker), or the policy could not be had (a PolicySource failed),
	// and no fallback decided: the policy's FailClosed did, Allowed telling
	// open from closed, Err why. Limit, Remaining and the durations say
	// nothing of the client's quota; a denial's RetryAfter is the policy's
	// FailClosed.
	SourceFailMode
	// SourceList: an allow or deny list decided, before any store (the
	// HTTP flow's lists, told to observers with Limiter.Observe).
	SourceList
	// SourceLease: a leased layer decided in process, from the share of
	// its quota that the Limiter holds (see Policy.Lease); Remaining is
	// then the Limiter's estimate of the fleet's.
	SourceLease

	// sourceKept, given to verdict, keeps each decision's own Source and
	// Err (some decided by a lease, some by the store).
	sourceKept Source = 255
)

// String returns "store", "fallback", "deny-cache", "fail-mode", "list" or
// "lease".
func (s Source) String() string {
	switch s {
	case SourceStore:
		return "store"
	case SourceFallback:
		return "fallback"
	case SourceDenyCache:
		return "deny-cache"
	case SourceFailMode:
		return "fail-mode"
	case SourceList:
		return "list"
	case SourceLease:
		return "lease"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Store holds rate-limit state and decides atomically; a third-party
// store implements it. A Store must be safe for concurrent use, implement
// every Algorithm with the semantics documented on its constant, and pass
// the suite in core/storetest. Every method takes 1 to 16 requests, each
// valid (see Request.Validate), no two with the same Key and Policy.Name;
// anything else is an error, never a panic. Any error is a store failure
// to the Limiter (see Decision.Err).
//
// A Limiter calls its store on the caller's goroutine, with the caller's
// ctx, and starts no goroutine and adds no deadline of its own. So a store
// that waits on I/O bounds every call itself (its own timeout, or ctx's
// deadline if earlier) and returns as soon as ctx ends, with an error
// wrapping the context's error (a timeout's wraps context.DeadlineExceeded
// or os.ErrDeadlineExceeded); the call may finish in the background, its
// result dropped, but never touches reqs or out once it has returned.
//
// A Store does not see every request: the deny cache (WithDenyCache) and
// an open circuit breaker (one probe per interval) spare it some. A
// fallback store (WithFallback) is asked the same requests when the store
// fails, and, to mirror it, after every admission of the store.
type Store interface {
	// Take decides reqs at now as one atomic step, all or nothing, and
	// fills out[i] (len(out) == len(reqs)) with the decision of reqs[i]:
	// every field but Policy, Source and Err, which the Limiter fills.
	// When every request is allowed, Take records them all; when any is
	// denied, none, and out[i] of one that would have been admitted alone
	// is Allowed, with the Remaining, ResetAfter and Delay it would have
	// had had it been taken (the Limiter adds its cost back to Remaining).
	// A denied request changes nothing but the lockout state of a policy
	// with a Lockout, which Take keeps and enforces in the same step (see
	// Policy.Lockout). Take never admits beyond any request's policy; a
	// store that cannot decide all the requests in one atomic step (keys
	// in several Redis Cluster slots) may, under contention, deny a set of
	// requests that would have fitted, and must say so.
	//
	// The zero now means the store's own clock (time.Now in memory, Redis
	// TIME on Redis, so that skewed app servers agree); an explicit now
	// makes time data, as tests do. Take returns the time it decided at:
	// now or its clock's reading, or the keys' latest admission when that
	// is later (a request dated before it is decided and recorded there).
	// That time dates a Refund of what Take admitted. A store deciding in
	// process returns a time read from this process's clock, with its
	// monotonic reading (which tells the Limiter the store never waits)
	// unless the caller's now had none; a store deciding elsewhere returns
	// its own clock's time with no monotonic reading, or the zero Time if
	// it cannot tell, and then cannot take refunds. On an error, zero.
	//
	// A Partitioned store whose Take fails on some of its partitions sets
	// out[i].Err, non-nil, for each request i it could not decide because
	// its partition failed, and returns an error too (those joined, say):
	// the Limiter counts the failure against those partitions alone.
	Take(ctx context.Context, now time.Time, reqs []Request, out []Decision) (time.Time, error)
	// Peek tells where each request's client stands without spending: it
	// fills out[i] as Take would decide reqs[i] at a cost of 1 (Allowed,
	// and RetryAfter when denied or Delay when admitted; LockedOut, with
	// the time left on it, during a lockout), but with the Remaining and
	// ResetAfter of the state as it stands, as a denial reports them. It
	// writes nothing: no count, no log entry, no expiry moved, no lockout
	// strike, no state created for a client that has none, nothing
	// trimmed or evicted. A peek at a time before the state's last
	// admission is decided at that admission, as Take decides. The
	// requests are decided each on its own, at one now, in one atomic
	// read where the store can (memory; one Redis: one round trip; a
	// Redis Cluster reads each slot's keys atomically, one script per
	// slot).
	Peek(ctx context.Context, now time.Time, reqs []Request, out []Decision) error
	// Refund gives back Cost units of each request to the admission that
	// Take dated at (never zero): from what that admission was counted in,
	// if it still is, changing nothing otherwise. The time is the
	// admission's identity: the store records each admission at exactly
	// that time or, where it cannot (a Redis Cluster slot that decided at
	// a later admission), notes under that time where it did; so no
	// admission since moves what a refund finds, admissions dated alike
	// are alike, and each gives back at most its own. Fixed window: the
	// count of the window holding at. Sliding window counter: the count of
	// at's window, current or, once the state has moved on, previous.
	// Sliding log: the entry logged at at (one per microsecond), never
	// more than it holds. Buckets: the level, by the units not drained
	// since (Cost less the drain between at and the key's last admission;
	// all of it when nothing was admitted since), never below empty. What
	// has left the window, or drained, is never given back. A refund
	// strikes no lockout and lifts none, creates no state and extends no
	// expiry. The requests are applied each on its own (none can fail
	// another), in one round trip where the store has several.
	Refund(ctx context.Context, at time.Time, reqs []Request) error
	// Reset forgets all state of key under policy, its lockout and strikes
	// included, so the client's next request finds a whole quota.
	Reset(ctx context.Context, key string, policy Policy) error
}
