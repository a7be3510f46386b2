// Package hooks lets the module's tests and exporters reach what the
// public API does not show. It imports nothing of the module; core and the
// stores set or read its variables.
package hooks

import (
	"context"
	"time"
)

// LimiterStore returns the Store of a *core.Limiter (as any), so that an
// exporter can read a store's own timeout (a Timeout() time.Duration
// method). core sets it in its init.
var LimiterStore func(limiter any) any

// DenyCacheLen returns how many denials the deny cache of a
// *core.Limiter remembers, for the exporters' gauge. core sets it in its
// init.
var DenyCacheLen func(limiter any) int

// Shadow reports whether a *core.Limiter is in shadow mode (it never
// denies; a Decision says Shadowed), for httplimit, which then neither
// paces nor writes the headers of a denial. core sets it in its init.
var Shadow func(limiter any) bool

// DefaultStoreTimeout, when positive, replaces redisstore's default
// timeout for the stores built after it is set without WithTimeout. Test
// helpers set it (internal/testkit/limitertest), so that a healthy store on a busy
// machine does not fail a test that is not about timeouts.
var DefaultStoreTimeout time.Duration

// StoreTimeout returns the timeout of store (an exporter's view): its
// Timeout method's, or 0 when it has none.
func StoreTimeout(store any) time.Duration {
	if s, ok := store.(interface{ Timeout() time.Duration }); ok {
		return s.Timeout()
	}
	return 0
}

// CircuitBreaker returns a core.Option (as any) that sets a Limiter's
// circuit breaker: failures consecutive store failures open it (0: never),
// and an open breaker probes the store at most once per probe. core sets
// it in its init; tests reach it through internal/testkit/limitertest.
var CircuitBreaker func(failures int, probe time.Duration) any

// FailClosed returns a core.Option (as any) that makes every policy of a
// Limiter fail closed for d, as if each had FailClosed d: a test's way
// to run one flow under both outage answers. core sets it in its init;
// tests reach it through internal/testkit/limitertest.
var FailClosed func(d time.Duration) any

// AllowTimed is core.Limiter.AllowLayers by its layered path, which
// returns the time the store decided at whatever the Limiter, for
// httplimit's settling layers (AllowLayers's one-check shortcut does not
// when observers are on): limiter a *core.Limiter, checks a []core.Check,
// out a []core.Decision at least as long, d a *core.Decision for the
// request's decision. The time is zero unless the store decided. core
// sets it in its init.
var AllowTimed func(limiter any, ctx context.Context, checks, out, d any) (time.Time, error)
