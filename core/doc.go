// Package core is the rate-limiting engine: it decides whether a request
// may pass, and knows nothing of HTTP, frameworks or Redis.
//
// A Policy says how many requests a client may make: Limit per Window, by
// one of five Algorithms. A Store keeps every client's state and decides
// atomically: core/memstore in process memory, core/redisstore in Redis,
// shared by many app servers. A Limiter ties its policies (one, or several
// layers that every request must pass) to a Store, and is safe for
// concurrent use:
//
//	store, err := memstore.New() // or redisstore.New(redisClient)
//	if err != nil { ... }
//	l, err := core.NewLimiter(store, []core.Policy{{
//		Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20,
//	}})
//	// ...
//	d, err := l.AllowN(ctx, clientKey, 1, time.Time{})
//	if err != nil {
//		return err // nothing was decided: ctx ended, or a bad key
//	}
//	if !d.Allowed {
//		// 429: come back after d.RetryAfter
//	}
//
// Bad input is an error wrapping ErrInvalidOption: a bad policy or option
// from NewLimiter, an empty key or a bad cost from a decision. A store
// that fails, or does not answer within its own timeout
// (redisstore.WithTimeout), is no error: the fallback store (WithFallback)
// decides, or else the policy's fail mode (Policy.FailClosed: open by
// default), and Decision.Err, wrapping ErrStore, says what went wrong;
// Decision.Source says which decided. A circuit breaker spares a failing
// store the wait: after 3 consecutive failures, one probe per 100 ms.
// AllowLayers decides a request of several layers, all or nothing.
//
// A Policy with a Lockout guards against brute force: a client the
// algorithm denies is locked out for a while, twice as long at each
// offence remembered, in the store, so that every app server enforces it;
// Limiter.Reset forgives (after a good login, say). WithShadow tries a
// policy without enforcing it: the Limiter decides and records as it
// would, but admits what it would have denied, marked Decision.Shadowed.
//
// A Policy with a Lease is leased: each Limiter that shares the layer
// takes a share of its quota from the store with one Take, decides from
// it in process (Decision.Source SourceLease), renews it before it runs
// out and gives back what it did not use, so that a key every app server
// touches (a limit for the whole API) costs a few store calls a Lease, not
// one a request. The bound: a share taken at the store's time t is used
// for at most Lease from when the Limiter asked (no later than t), and a
// window algorithm's share never past the end of t's window. So every unit
// admitted in process was counted in the window it was admitted in: a
// FixedWindow never admits more than Limit in a window, and a
// SlidingWindowCounter no more than without leases (its estimate, checked
// at each take, only falls between takes). A TokenBucket's admissions in
// any interval [a, b] were taken in [a-Lease, b]: at most
// Burst + rate*(b-a+Lease), Lease*rate more than without leases, 1% of
// Limit for a Lease of Window/100. A test searches for a counter-example
// on both stores; docs/leases.md has the proof in full, the simulation at
// scale and the measurements.
package core
