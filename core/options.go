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
	failMode      FailMode
	failRetry     time.Duration
	fallback      Store
	denyCacheKeys int // 0: no deny cache
	brkFailures   int // 0: no circuit breaker
	probeInterval time.Duration
	observers     []Observer
	shadow        bool
	sources       []PolicySource
}

func defaultConfig() config {
	return config{
		failMode:      FailOpen,
		failRetry:     time.Second,
		brkFailures:   DefaultBreakerFailures,
		probeInterval: DefaultProbeInterval,
	}
}

// WithFailMode sets what the Limiter decides when its store fails.
func WithFailMode(m FailMode) Option {
	return func(c *config) error {
		if m != FailOpen && m != FailClosed {
			return fmt.Errorf("%w: unknown fail mode %d", ErrInvalidOption, int(m))
		}
		c.failMode = m
		return nil
	}
}

// WithFailClosedRetry sets the RetryAfter of decisions denied by FailClosed,
// at least a millisecond. The default is one second.
func WithFailClosedRetry(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: fail-closed retry %v is under 1ms", ErrInvalidOption, d)
		}
		c.failRetry = d
		return nil
	}
}

// WithFallback makes the Limiter keep limiting with fallback, an in-process
// store that never waits (a memstore.Store), when its store fails, instead
// of applying its FailMode: the fallback answers while the store is
// failing, with the caller's context, so it must never block.
//
// The fallback mirrors the store: every request the store admits is taken
// in the fallback too (a refusal there is ignored while the store is
// Healthy). When the store fails, times out or has its circuit breaker
// open, the fallback decides alone: such decisions have Source
// SourceFallback and come with the store's error (wrapping ErrStore), for
// the caller to log. After such a decision the Limiter is Recovering for as
// long as the state it left can still matter (a Window for the fixed
// window and the log, two for the sliding counter, for the buckets the
// time a full bucket takes to refill or drain): a request then passes only
// when the store and the fallback both admit it, and a refusal of the
// fallback has Source SourceFallback (with no error; the store has counted
// the request).
//
// So one app server never admits more than the policy allows one client,
// L per window, however often the store fails and comes back, since its
// fallback counts every admission it makes; across N app servers, while
// the store is down, at most N times that. The fallback counts on the app
// server's clock, a Redis store on Redis's (TIME): with a skew s between
// the two, the bound holds for windows as the app server's clock measures
// them, and a window measured on Redis's clock may take in admissions from
// up to s outside it. The mirror costs a fallback Take per admitted request
// and a fallback key per client admitted; a fallback that evicts keys
// (memstore's WithMaxKeys) forgets their counts, and the bound with them.
// The FailMode applies if the fallback fails too.
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
// decided (RetryAfter, Remaining, LockedOut, Source), so that logs can
// show them; its observers hear OutcomeShadowDenied. Admitted requests are
// returned as they are, a leaky bucket's Delay included. Errors are
// returned as they are: a shadowed store failure still comes with its
// error wrapping ErrStore, and invalid input and ErrCanceled are not
// decisions, so they are never shadowed (their Decision stays not
// Allowed). Limiter.Shadow reports the mode, for the HTTP flow, which
// writes no rate-limit headers in shadow mode by default.
func WithShadow() Option {
	return func(c *config) error {
		c.shadow = true
		return nil
	}
}
