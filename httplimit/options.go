package httplimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/keyfuncs"
)

// ErrInvalidOption reports a nil limiter, or an option given a nil function
// or a value out of range. New returns it, wrapped with the detail.
var ErrInvalidOption = errors.New("httplimit: invalid option")

// DefaultMaxDelay is the longest a request paced by a leaky bucket waits
// when WithMaxDelay is not given.
const DefaultMaxDelay = time.Second

// Option configures a Flow. Every adapter accepts the same Options, so a
// configuration moves from one framework to another unchanged.
type Option func(*Config)

// Config is what Options set. Its fields are reachable only through the
// With... functions, which is how New can check every one of them; the
// zero Config, completed by New, is the documented default of each.
type Config struct {
	keyFunc     keyfuncs.Func
	headers     headers.Config
	headersSet  bool
	skips       []func(keyfuncs.Request) bool
	cost        func(keyfuncs.Request) int64
	deny        DenyHandler
	unavailable DenyHandler
	onError     ErrorHandler
	respondErr  ErrorResponder
	maxDelay    time.Duration
	maxDelaySet bool
	now         func() time.Time
	err         error
}

// invalid records the first invalid option, for New to return.
func (c *Config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
}

// WithKeyFunc sets who the client is. The default is keyfuncs.IP() with no
// trusted proxy: the socket peer's address, IPv6 grouped by /56, and no
// forwarding header believed. To fall back from one key to another, pass
// keyfuncs.FirstOf; to limit per endpoint, keyfuncs.Compose with
// keyfuncs.Route.
func WithKeyFunc(fn keyfuncs.Func) Option {
	return func(c *Config) {
		if fn == nil {
			c.invalid("nil key function")
			return
		}
		c.keyFunc = fn
	}
}

// WithHeaders selects the rate-limit header fields written on limited
// responses. The default is headers.Default(); the zero headers.Config
// writes none.
func WithHeaders(cfg headers.Config) Option {
	return func(c *Config) {
		c.headers = cfg
		c.headersSet = true
	}
}

// WithSkip exempts the requests for which skip reports true: they pass
// without a decision, a key or a header. Several WithSkip options add up:
// a request is skipped when any of them says so.
func WithSkip(skip func(keyfuncs.Request) bool) Option {
	return func(c *Config) {
		if skip == nil {
			c.invalid("nil skip function")
			return
		}
		c.skips = append(c.skips, skip)
	}
}

// WithCost weighs requests: cost returns how many units of the quota a
// request takes (1 when WithCost is not given). A cost below 1 or above the
// policy's capacity is a programming error: the request gets the
// ErrorResponder's answer (500 by default), never a panic and never a 429.
func WithCost(cost func(keyfuncs.Request) int64) Option {
	return func(c *Config) {
		if cost == nil {
			c.invalid("nil cost function")
			return
		}
		c.cost = cost
	}
}

// WithDenyHandler sets the response to a request over its limit. The rate
// limit headers, Retry-After included, are already set when it is called.
// The default is DefaultDenyHandler.
func WithDenyHandler(h DenyHandler) Option {
	return func(c *Config) {
		if h == nil {
			c.invalid("nil deny handler")
			return
		}
		c.deny = h
	}
}

// WithUnavailableHandler sets the response to a request denied because the
// store failed under core.FailClosed. Retry-After (the Limiter's
// fail-closed retry) is already set when headers are configured to carry it;
// no other rate-limit header is, since the store told nothing. The default
// is DefaultUnavailableHandler (503).
func WithUnavailableHandler(h DenyHandler) Option {
	return func(c *Config) {
		if h == nil {
			c.invalid("nil unavailable handler")
			return
		}
		c.unavailable = h
	}
}

// WithErrorHandler sets who hears about errors: every error the flow meets
// (a failed store, whether it failed open or closed; a key function that
// failed; a bad cost; a client that left, core.ErrCanceled; a recovered
// panic, ErrPanic) is passed to h before the request is answered. h only
// observes; it writes nothing. The default is LogErrors(nil).
func WithErrorHandler(h ErrorHandler) Option {
	return func(c *Config) {
		if h == nil {
			c.invalid("nil error handler")
			return
		}
		c.onError = h
	}
}

// WithErrorResponder sets the response to a request the flow cannot
// decide or serve: the key function failed, the Limiter refused the
// request's key or cost, the client left (core.ErrCanceled), or a panic
// was recovered (ErrPanic). It must write a response: the adapter stops
// the chain either way. The default is DefaultErrorResponder: 499 for a
// client that left, 400 when the key function found no key
// (keyfuncs.ErrNoKey), 500 otherwise. To fall back to another key instead
// of refusing the request, use keyfuncs.FirstOf in WithKeyFunc.
func WithErrorResponder(h ErrorResponder) Option {
	return func(c *Config) {
		if h == nil {
			c.invalid("nil error responder")
			return
		}
		c.respondErr = h
	}
}

// WithMaxDelay caps the pacing of leaky-bucket decisions. An allowed
// Decision with a Delay holds the request for min(Delay, d) before it
// proceeds, or until its context ends, in which case it never proceeds.
// A Delay above the cap is cut to it: the request leaves early, so the
// shaping is exact only for delays within the cap; the bucket still polices
// the rate. d = 0 disables pacing (the leaky bucket then only polices); a
// negative d is invalid. The default is DefaultMaxDelay.
func WithMaxDelay(d time.Duration) Option {
	return func(c *Config) {
		if d < 0 {
			c.invalid("negative max delay %v", d)
			return
		}
		c.maxDelay = d
		c.maxDelaySet = true
	}
}

// WithClock sets the clock behind header values that are absolute times
// (X-RateLimit-Reset). It is meant for tests, with the same clock given to
// the Limiter by core.WithClock. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *Config) {
		if now == nil {
			c.invalid("nil clock")
			return
		}
		c.now = now
	}
}
