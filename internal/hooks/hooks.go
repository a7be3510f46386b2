// Package hooks lets the module's tests and exporters reach what the
// public API does not show. It imports nothing of the module; core and the
// stores set or read its variables.
package hooks

import "time"

// LimiterStore returns the Store of a *core.Limiter (as any), so that an
// exporter can read a store's own timeout (a Timeout() time.Duration
// method). core sets it in its init.
var LimiterStore func(limiter any) any

// DefaultStoreTimeout, when positive, replaces redisstore's default
// timeout for the stores built after it is set without WithTimeout. Test
// helpers set it (internal/limitertest), so that a healthy store on a busy
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
