package sloglimit

import (
	"fmt"
	"log/slog"
	"math"

	"github.com/apigate/ratelimit/core"
)

// Option configures a Logger. New applies its options in order and fails
// at the first whose value is out of range, with an error wrapping
// core.ErrInvalidOption; a nil Option is such an error too.
type Option func(*config) error

// Defaults of a Logger built with no options.
const (
	// DefaultRate is how many records per second a Logger writes at most,
	// in the long run, for each limit and class (denials, store failures).
	DefaultRate = 10
	// DefaultBurst is how many records a Logger writes at once, for each
	// limit and class, before the rate applies.
	DefaultBurst = 10
)

// KeyMode says how a Logger shows the client key of a record.
type KeyMode uint8

const (
	// KeysSafe, the default, shows as it is, in the attribute "key", a key
	// that cannot hold a secret (see the package documentation: keyfuncs'
	// IP keys, its API-key hashes, the core's "sha256:" digests and their
	// compositions), and any other key only as its digest, in the
	// attribute "key_hash".
	KeysSafe KeyMode = iota
	// KeysHashed shows every key as its digest ("key_hash"), IP addresses
	// included: for logs that must hold no client address.
	KeysHashed
	// KeysRaw shows every key as it is ("key"). It is UNSAFE for keys
	// that may hold a secret: a key function that passes a raw API key,
	// token or e-mail address puts it in the log. Use it only when every
	// key function of the Limiters observed is known to produce keys fit
	// to be logged.
	KeysRaw
	// KeysHidden shows no key at all.
	KeysHidden
	numKeyModes
)

// String returns "safe", "hashed", "raw" or "hidden".
func (m KeyMode) String() string {
	switch m {
	case KeysSafe:
		return "safe"
	case KeysHashed:
		return "hashed"
	case KeysRaw:
		return "raw"
	case KeysHidden:
		return "hidden"
	}
	return fmt.Sprintf("KeyMode(%d)", int(m))
}

// config is what the Options set, with the defaults of New.
type config struct {
	outcomes  uint64 // bit o set: Outcome o is logged
	level     slog.Level
	errLevel  slog.Level
	rate      float64
	burst     int
	keys      KeyMode
	keySecret []byte
}

// defaultOutcomes are the Outcomes a Logger writes without WithOutcomes:
// every refusal of a Limiter, every decision made without the store, and
// every denial that shadow mode let through.
var defaultOutcomes = []core.Outcome{
	core.OutcomeDenied, core.OutcomeDenyCache, core.OutcomeFallbackDenied,
	core.OutcomeFailedClosed, core.OutcomeFailedOpen, core.OutcomeFallbackAllowed,
	core.OutcomeLockedOut, core.OutcomeShadowDenied,
}

func defaultConfig() config {
	c := config{
		level:    slog.LevelInfo,
		errLevel: slog.LevelWarn,
		rate:     DefaultRate,
		burst:    DefaultBurst,
	}
	for _, o := range defaultOutcomes {
		c.outcomes |= 1 << o
	}
	return c
}

// WithOutcomes sets which outcomes are logged, replacing the default:
// denied, deny_cache, fallback_denied, failed_closed, failed_open,
// fallback_allowed, locked_out and shadow_denied (every refusal of a
// Limiter, every decision the store did not make, and every denial shadow
// mode let through); allowed, canceled, invalid, allow_listed and
// deny_listed are not logged unless listed here.
// No outcome, or one that core.Outcomes does not list, is invalid.
func WithOutcomes(outcomes ...core.Outcome) Option {
	return func(c *config) error {
		if len(outcomes) == 0 {
			return fmt.Errorf("%w: sloglimit.WithOutcomes: no outcome", core.ErrInvalidOption)
		}
		n := len(core.Outcomes())
		var set uint64
		for _, o := range outcomes {
			if int(o) >= n || o >= 64 {
				return fmt.Errorf("%w: sloglimit.WithOutcomes: unknown %v", core.ErrInvalidOption, o)
			}
			set |= 1 << o
		}
		c.outcomes = set
		return nil
	}
}

// WithLevel sets the level of records whose event is not a store failure
// (denials, and the outcomes WithOutcomes adds). The default is
// slog.LevelInfo.
func WithLevel(level slog.Level) Option {
	return func(c *config) error {
		c.level = level
		return nil
	}
}

// WithStoreErrorLevel sets the level of records whose event is a store
// failure: its Err wraps core.ErrStore (failed_open, failed_closed and
// the fallback's decisions, timeouts and an open circuit breaker
// included). The default is slog.LevelWarn.
func WithStoreErrorLevel(level slog.Level) Option {
	return func(c *config) error {
		c.errLevel = level
		return nil
	}
}

// WithSampling sets how many records a Logger writes, for each limit and
// class (denials; store failures): at most burst at once, then perSecond
// per second (a token bucket; over any span of t seconds, at most burst +
// perSecond*t records). The records it drops are counted, and the next
// record written carries the count. The default is DefaultRate per second
// with a burst of DefaultBurst. perSecond must be positive, finite and at
// most 1e9 (one per nanosecond), burst at least 1, and burst records at
// perSecond must span less than a century.
func WithSampling(perSecond float64, burst int) Option {
	return func(c *config) error {
		switch {
		case math.IsNaN(perSecond) || perSecond <= 0 || perSecond > 1e9:
			return fmt.Errorf("%w: sloglimit.WithSampling: rate %v is out of (0, 1e9] per second", core.ErrInvalidOption, perSecond)
		case burst < 1:
			return fmt.Errorf("%w: sloglimit.WithSampling: burst %d is under 1", core.ErrInvalidOption, burst)
		case float64(burst)/perSecond > maxSpan.Seconds():
			return fmt.Errorf("%w: sloglimit.WithSampling: a burst of %d at %v per second spans over %v", core.ErrInvalidOption, burst, perSecond, maxSpan)
		}
		c.rate, c.burst = perSecond, burst
		return nil
	}
}

// WithKeys sets how client keys are shown (see KeyMode). The default is
// KeysSafe.
func WithKeys(m KeyMode) Option {
	return func(c *config) error {
		if m >= numKeyModes {
			return fmt.Errorf("%w: sloglimit.WithKeys: unknown %v", core.ErrInvalidOption, m)
		}
		c.keys = m
		return nil
	}
}

// WithKeySecret keys the digest of "key_hash" with secret (HMAC-SHA256
// instead of SHA-256), so that a digest in the log cannot be checked
// against guessed keys (user IDs, e-mail addresses: keys with little
// entropy) without the secret. The secret is copied; an empty one is
// invalid.
func WithKeySecret(secret []byte) Option {
	return func(c *config) error {
		if len(secret) == 0 {
			return fmt.Errorf("%w: sloglimit.WithKeySecret: empty secret", core.ErrInvalidOption)
		}
		c.keySecret = append([]byte(nil), secret...)
		return nil
	}
}
