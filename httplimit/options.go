package httplimit

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// defaultMaxDelay is the longest a request paced by a leaky bucket waits
// when WithMaxDelay is not given.
const defaultMaxDelay = time.Second

// Option configures a Flow (New). Adapters take the Flow, so a
// configuration moves from one framework to another unchanged. New
// returns the first error an Option reports, wrapping core.ErrInvalidOption.
type Option func(*config) error

// config is what Options set; the zero config, completed by New, is the
// documented default of each.
type config struct {
	core        []core.Option
	headers     headers.Config
	headersSet  bool
	skips       []func(keyfuncs.Request) bool
	respond     Responder
	onError     ErrorHandler
	maxDelay    time.Duration
	maxDelaySet bool
	clientIP    *keyfuncs.ClientIP
	allow       []access.Matcher
	deny403     []access.Matcher
	problems    bool
	quota       *route   // WithQuota's path
	quotaShow   []string // WithQuota's layers shown whatever their key
	rep         *reputation.Tracker
	repBans     access.Matcher // set by New from rep
}

// invalid returns the error of the option named fn given a bad value.
func invalid(fn, detail string) error {
	return fmt.Errorf("%w: httplimit.%s: %s", core.ErrInvalidOption, fn, detail)
}

// WithCore passes opts to the Limiter New builds (core.NewLimiter, given
// the layers' policies): its fallback store, shadow mode, policy source,
// observers, deny cache. Several WithCore options add up, in order. A nil option is
// reported by New.
func WithCore(opts ...core.Option) Option {
	return func(c *config) error {
		c.core = append(c.core, opts...)
		return nil
	}
}

// WithHeaders selects the rate-limit header fields written on limited
// responses. The default is headers.Config{XRateLimit: true, Draft6: true,
// RetryAfter: true}, the fields most clients read today, and for a Limiter in shadow
// mode (core.WithShadow) the zero headers.Config, which writes none: a
// policy on trial tells clients nothing. Given in shadow mode, cfg is
// written from the decision as made (a would-be denial's Remaining is 0),
// without Retry-After, since the request passes.
func WithHeaders(cfg headers.Config) Option {
	return func(c *config) error {
		c.headers = cfg
		c.headersSet = true
		return nil
	}
}

// WithSkip exempts the requests for which skip reports true. They pass
// without a decision, a key or a header. Several WithSkip options add up:
// a request is skipped when any of them says so. A nil skip is invalid.
func WithSkip(skip func(keyfuncs.Request) bool) Option {
	return func(c *config) error {
		if skip == nil {
			return invalid("WithSkip", "nil skip function")
		}
		c.skips = append(c.skips, skip)
		return nil
	}
}

// WithResponder sets the answer to every request that does not proceed:
// over its limit (429 by default), refused by a failed store under
// a layer's FailClosed (503), deny-listed (403), or not decided (400 no key,
// 499 client left, 500). h must write a response: the adapter stops the
// chain either way. To fall back to another key instead of refusing a
// request without one, use keyfuncs.FirstOf in the layer's Key. The
// default is DefaultResponder. A nil h is invalid. With
// WithProblemDetails, a client that asks for problem details gets them
// instead of h's answer to a refusal (429, 503, 403).
func WithResponder(h Responder) Option {
	return func(c *config) error {
		if h == nil {
			return invalid("WithResponder", "nil responder")
		}
		c.respond = h
		return nil
	}
}

// WithErrorHandler sets who hears about the errors of the flow. Every
// error the flow meets (a failed store, whether it failed open or closed;
// a key function that failed; a bad cost; a client that left, its
// context's error; a recovered panic, a *PanicError) is passed to h before the
// request is answered, every store failure included: only LogErrors
// bounds its lines. h only observes; it writes nothing. The default is
// LogErrors(nil). A nil h is invalid.
func WithErrorHandler(h ErrorHandler) Option {
	return func(c *config) error {
		if h == nil {
			return invalid("WithErrorHandler", "nil error handler")
		}
		c.onError = h
		return nil
	}
}

// WithMaxDelay caps the pacing of leaky-bucket decisions. An allowed
// Decision with a Delay holds the request for min(Delay, d) before it
// proceeds, or until its context ends, in which case it never proceeds.
// A Delay above the cap is cut to it: the request leaves early, so the
// shaping is exact only for delays within the cap; the bucket still polices
// the rate. d = 0 disables pacing (the leaky bucket then only polices); a
// negative d is invalid. The default is one second.
func WithMaxDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return invalid("WithMaxDelay", fmt.Sprintf("negative delay %v", d))
		}
		c.maxDelay = d
		c.maxDelaySet = true
		return nil
	}
}
