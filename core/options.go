package core

import (
	"fmt"
	"time"
)

// Option configures a Limiter. NewLimiter applies its options in order and
// fails at the first whose value is out of range, with an error wrapping
// ErrInvalidOption; a nil Option is such an error too.
type Option func(*config) error

// config is what the Options set, with the defaults of NewLimiter.
type config struct {
	fallback      Store
	denyCacheKeys int // 0: no deny cache
	brkFailures   int // 0: no circuit breaker
	probeInterval time.Duration
	observers     []Observer
	shadow        bool
	sources       []PolicySource
}

// The circuit breaker every Limiter has unless WithCircuitBreaker says
// otherwise: 3 consecutive store failures open it, and an open breaker
// probes the store once per 100 ms.
const (
	breakerFailures = 3
	probeInterval   = 100 * time.Millisecond
)

func defaultConfig() config {
	return config{brkFailures: breakerFailures, probeInterval: probeInterval}
}

// maxBreakerFailures bounds the breaker's failures, which it counts in 32
// bits.
const maxBreakerFailures = 1<<31 - 1

// WithCircuitBreaker sets when the Limiter stops asking a failing store
// (by default after 3 failures, probing every 100 ms). After failures
// consecutive store failures (timeouts included; the caller's
// cancellations and invalid input are not failures), the breaker opens:
// the Limiter decides at once, by its fallback store or else the
// policies' FailClosed, Decision.Err saying the breaker is open. Meanwhile
// at most one request per probe interval asks the store; the first the
// store answers closes the breaker. failures 0 turns the breaker off;
// probe must be at least 1 ms.
func WithCircuitBreaker(failures int, probe time.Duration) Option {
	return func(c *config) error {
		if failures < 0 || failures > maxBreakerFailures {
			return fmt.Errorf("%w: circuit breaker failures %d is out of range [0, %d]", ErrInvalidOption, failures, maxBreakerFailures)
		}
		if probe < time.Millisecond {
			return fmt.Errorf("%w: circuit breaker probe interval %v is under 1ms", ErrInvalidOption, probe)
		}
		c.brkFailures, c.probeInterval = failures, probe
		return nil
	}
}

// WithFallback makes the Limiter keep limiting with fallback, an
// in-process store that never blocks (a memstore.Store), instead of
// applying the policies' FailClosed, when its store fails, times out or
// has its circuit breaker open (over a Partitioned store such as a Redis
// Cluster, the breaker of the request's partition). The fallback then
// decides alone, with the caller's context: Source SourceFallback,
// Decision.Err the store's error. FailClosed applies if it fails too.
//
// The fallback mirrors the store: it takes every request the store admits
// (a fallback Take, and a fallback key, per client admitted; its refusal
// is ignored while the store is Healthy). After a fallback decision the
// Limiter is Recovering while the state it left can matter: a request
// then passes only when both stores admit it, a fallback refusal having
// Source SourceFallback and no Err. So one app server never admits more
// than a policy allows a client, however the store flaps, and N servers
// at most N times that, each on its own clock (see docs/redis.md); a
// fallback that evicts keys (memstore.WithMaxKeys) forgets that bound.
func WithFallback(fallback Store) Option {
	return func(c *config) error {
		if fallback == nil {
			return fmt.Errorf("%w: nil fallback store", ErrInvalidOption)
		}
		c.fallback = fallback
		return nil
	}
}

// WithShadow puts the Limiter in shadow mode, to try a policy on live
// traffic before enforcing it: the Limiter decides and records exactly as
// it would, but never denies. A request it would have denied (by the
// store, a lockout, the deny cache, the fallback store or FailClosed) is
// returned Allowed, with Decision.Shadowed set and every other field as
// decided (RetryAfter, Remaining, LockedOut, Source, Err), so that logs
// can show them. Admitted requests are returned as they are, a leaky
// bucket's Delay included. A call that returns an error decided nothing,
// and is never shadowed. The HTTP flow (httplimit) of a shadow Limiter
// writes no rate-limit headers by default and never paces.
func WithShadow() Option {
	return func(c *config) error {
		c.shadow = true
		return nil
	}
}
