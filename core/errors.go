package core

import "errors"

// Sentinel errors. Callers branch on them with errors.Is; the errors the
// package returns wrap them with the detail of what was wrong.
var (
	// ErrInvalidPolicy reports a Policy that Validate rejects: an unknown
	// algorithm, a limit, window or burst out of range, a malformed name.
	ErrInvalidPolicy = errors.New("ratelimit: invalid policy")

	// ErrInvalidOption reports a bad option or argument given to a
	// constructor: a value out of range, a nil function or store. It is the
	// one such sentinel of the whole module: core, the stores, keyfuncs,
	// httplimit and the adapters all wrap it.
	ErrInvalidOption = errors.New("ratelimit: invalid option")

	// ErrInvalidKey reports an empty client key. A key function that cannot
	// identify the client must say so with an error of its own; it must never
	// fall back to a shared empty key.
	ErrInvalidKey = errors.New("ratelimit: invalid key")

	// ErrInvalidCost reports a cost of zero or less.
	ErrInvalidCost = errors.New("ratelimit: invalid cost")

	// ErrCostExceedsLimit reports a cost larger than the policy can ever
	// admit (its Capacity). Such a request would be denied forever, so it is
	// refused as a programming error instead of being reported as a 429.
	ErrCostExceedsLimit = errors.New("ratelimit: cost exceeds the policy's capacity")

	// ErrStore wraps every failure of the Store behind a Limiter, timeouts
	// included. The Decision returned with it comes from the Limiter's
	// fallback store or FailMode.
	ErrStore = errors.New("ratelimit: store failed")

	// ErrTimeout reports a store that did not answer within the Limiter's
	// timeout. Errors wrapping it also wrap ErrStore.
	ErrTimeout = errors.New("ratelimit: store timed out")

	// ErrCircuitOpen reports a decision made without asking the store,
	// because the Limiter's circuit breaker is open after consecutive store
	// failures (see WithCircuitBreaker). Errors wrapping it also wrap
	// ErrStore; the Decision comes from the fallback store or the FailMode.
	ErrCircuitOpen = errors.New("ratelimit: circuit breaker open")

	// ErrCanceled reports a decision the caller abandoned: its context ended
	// (the client disconnected, or the caller's own deadline passed) before
	// the store decided. The caller's cancellation is not a store failure:
	// the Decision returned with it is never Allowed, and no FailMode or
	// fallback store applies. Errors wrapping it also wrap the context's
	// error (context.Canceled or context.DeadlineExceeded).
	ErrCanceled = errors.New("ratelimit: decision canceled by the caller")
)
