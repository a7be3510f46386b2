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
	// leaves it nil.
	Err error
}

// Request is one question a Limiter asks its Store.
type Request struct {
	// Key identifies the client. The Limiter has checked it: never empty,
	// at most 128 bytes of printable ASCII with no '{' or '}'.
	Key string
	// Policy has been validated and has a Name.
	Policy Policy
	// Cost is in [1, the policy's capacity] (Burst for the buckets, or
	// Limit); 0 for a peek (Limiter.Peek); below 0 for a give-back
	// (Limiter.Refund), of -Cost units, at most the capacity.
	//
	// A peek asks where the client stands without spending: the store
	// decides it as a request of cost 1 would be decided (Allowed, and
	// RetryAfter when denied or Delay when admitted; LockedOut, with the
	// time left on it, during a lockout), but its Remaining and ResetAfter
	// are those of the state as it stands, as a denied request reports
	// them, and it writes nothing: no count, no log entry, no expiry
	// moved, no lockout strike, no state created for a client that has
	// none, nothing trimmed or evicted. A peek at a time before the
	// state's last admission is decided at that admission, as Take
	// decides. In TakeAll, either every request is a peek or none is (a
	// mix is invalid input); peeks are decided each on its own, at one
	// now, in one atomic read where the store can (memory; one Redis: one
	// round trip; a Redis Cluster reads each slot's keys atomically, one
	// script per slot).
	//
	// A give-back returns units that an admission took: now is the time
	// Take or TakeAll returned for that admission (never zero), and the
	// store removes -Cost units from what that admission was counted in,
	// if it is still counted there, and changes nothing otherwise. That
	// time is the admission's identity: the store records the admission
	// at exactly that time (a request dated before the key's last
	// admission is decided, recorded and returned at that admission; every
	// request of a TakeAll at one time), or, where it cannot (a Redis
	// Cluster slot that decided at a later admission than the others),
	// notes under that time where it recorded it. So no request admitted
	// since moves what a give-back finds: the units of admissions that
	// returned one time are alike, and each gives back at most its own.
	// Fixed
	// window: the count of the window that holds now. Sliding window
	// counter: the count of now's window, the current one or, once the
	// state has moved on, the previous one. Sliding log: the entry logged
	// at now (one per microsecond: the units admitted in it are alike),
	// never more than it holds. The buckets: the level, by the units
	// that have not drained since (-Cost less the drain between now and
	// the key's last admission; all of it when nothing was admitted
	// since), never below empty. What has left the window, or drained,
	// is never given back, so that a late give-back frees nothing that
	// time has not freed already. A give-back is never denied: its
	// Decision is Allowed, with the policy's capacity as Limit and every
	// other field zero. It strikes no lockout and lifts none, creates no
	// state and extends no expiry. In TakeAll, either every request is a
	// give-back or none is; give-backs are applied each on its own (they
	// cannot conflict), in one round trip where the store has several.
	Cost int64

	// _ keeps a Request 128 bytes, a multiple of 16: see Policy's.
	_ [8]byte
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
)

// String returns "store", "fallback", "deny-cache", "fail-mode" or "list".
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
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Store holds rate-limit state and decides atomically. Implementations must
// be safe for concurrent use, implement every Algorithm with the semantics
// documented on its constant, and pass the suite in core/storetest.
//
// A Limiter calls its store on the caller's goroutine, with the caller's
// ctx, and starts no goroutine and builds no deadline of its own. So a
// store that waits on I/O bounds every call itself (its own timeout, or
// ctx's deadline if earlier) and returns as soon as ctx ends, with an error
// wrapping the context's error; the call may finish in the background, its
// result dropped. The Limiter reads a timeout from that error (it wraps
// context.DeadlineExceeded, or os.ErrDeadlineExceeded from a socket) unless
// the caller's own ctx has ended. redisstore.Store is such a store. A
// store that bounds its calls may tell its bound with a method
// Timeout() time.Duration, which the exporters in observe read (through
// Limiter.Store) as the store's timeout.
type Store interface {
	// Take decides one request and, when it is allowed, records it, as one
	// atomic step; a denied request changes nothing but the lockout state
	// of a policy with a Lockout, which Take keeps and enforces with the
	// semantics documented on Policy.Lockout, in the same atomic step. It leaves
	// Decision.Policy and Decision.Source zero: the Limiter fills them.
	// Invalid input (a request that breaks the contract on Request) is an error, never a panic; any
	// error is a store failure to the Limiter (see Decision.Err).
	//
	// A Store does not see every request of a client: a Limiter answers a
	// repeated denial from its deny cache (WithDenyCache), and, while its
	// circuit breaker is open, asks the store only a
	// probe per interval. A fallback store (WithFallback) is asked with the
	// same Request when the store fails, and, to mirror the store's count,
	// after every request the store admits.
	//
	// ctx is the caller's: Take returns promptly once it ends (see Store).
	// now is the time of the decision: the zero Time (Limiter.Allow)
	// means the store's own clock, time.Now for memory, Redis TIME for
	// Redis, so that app servers with skewed clocks still agree; the
	// now of Limiter.AllowN makes it explicit, as tests do. Take returns the
	// time it decided at when it decided in process (now, or the reading
	// of its own clock, or the key's last admission when that is later),
	// which dates a give-back of what it admitted (see Request.Cost). A store that decides in process returns a time read
	// from this process's clock, carrying its monotonic reading (see the
	// time package), unless the caller's now carried none: the Limiter
	// then knows the store never waits, and a caller writing an absolute
	// time from the Decision, such as X-RateLimit-Reset, need not read
	// the clock again. A store that decides elsewhere returns the time it
	// decided at by its own clock (Redis TIME), with no monotonic
	// reading, or the zero Time if it cannot tell, and then cannot take
	// give-backs. On an error the time is zero.
	Take(ctx context.Context, now time.Time, req Request) (Decision, time.Time, error)
	// TakeAll decides reqs, 1 to 16 of them, all or nothing, at now as
	// Take does, and fills out[i] with the decision of reqs[i]; len(out)
	// == len(reqs). The requests are valid (see Take) and no two have the
	// same Key and Policy.Name. When every request is allowed, TakeAll
	// records them all. When any is denied, it records none of them:
	// out[i] of a request that would have been admitted alone is Allowed,
	// with the Remaining, ResetAfter and Delay it would have had had it
	// been taken (the Limiter adds its cost back to Remaining); a denied
	// request's lockout state is kept, as Take keeps it. The store must
	// never admit beyond any request's policy; a store that cannot decide
	// all the requests in one atomic step (keys in several Redis Cluster
	// slots) may, under contention, deny a set of requests that would
	// have fitted, and must say so. Like Take, TakeAll leaves
	// Decision.Policy and Decision.Source zero, returns the time it
	// decided at (every request of a TakeAll is decided at one time, the
	// latest of its keys' last admissions when that is later than now,
	// which dates the give-backs of all of them), and any error is a store
	// failure.
	TakeAll(ctx context.Context, now time.Time, reqs []Request, out []Decision) (time.Time, error)
	// Reset forgets all state of key under policy, its lockout and strikes
	// included, so the client's next request finds a whole quota. The
	// Limiter calls it as it calls Take.
	Reset(ctx context.Context, key string, policy Policy) error
}
