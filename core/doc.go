// Package core is the rate-limiting engine: it decides whether a request
// may pass, and knows nothing of HTTP, frameworks or Redis.
//
// A Policy says how many requests a client may make (Limit per Window, by
// one of five Algorithms). A Store keeps the state of every client and
// decides atomically: core/memstore keeps it in process memory, with no
// setup; core/redisstore keeps it in Redis, so that many app servers share
// exact limits. A Limiter ties one Policy to a Store and is what callers
// use:
//
//	store, err := memstore.New() // or redisstore.New(redisClient)
//	if err != nil { ... }
//	l, err := core.NewLimiter(store, core.Policy{
//		Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20,
//	})
//	d, err := l.Allow(ctx, clientKey)
//	if !d.Allowed { /* 429, come back after d.RetryAfter */ }
//
// Allow and AllowN (for weighted requests) return a Decision: allowed or
// not, Limit, Remaining, ResetAfter, RetryAfter (exact: the earliest moment
// the same request would pass) and, for the leaky bucket, the Delay that
// shapes admitted requests to a steady rate.
//
// Failures: invalid policies fail at NewLimiter, invalid input at the call,
// always with an error wrapping a sentinel (ErrInvalidPolicy, ErrInvalidKey,
// ErrInvalidCost, ErrCostExceedsLimit). A store that fails or does not
// answer within the Limiter's timeout (DefaultTimeout unless WithTimeout
// says) yields the Decision of the Limiter's FailMode (FailOpen by default)
// together with an error wrapping ErrStore, for the caller to log. After a
// few consecutive failures a circuit breaker stops waiting on the store
// until it answers a probe again (WithCircuitBreaker, Limiter.Health). The
// caller's own cancellation is not a store failure: a decision whose
// context ended before the store decided is never Allowed, and its error
// wraps ErrCanceled.
//
// All methods are safe for concurrent use.
package core
