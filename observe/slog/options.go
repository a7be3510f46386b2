package sloglimit

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/outcome"
)

// Option configures a Logger. New applies its options in order and fails
// at the first whose value is out of range, with an error wrapping
// core.ErrInvalidOption; a nil Option is such an error too.
type Option func(*config) error

// Defaults of a Logger built with no options: at most 10 records at once,
// then 10 per second, for each limit and class (see WithSampling).
const (
	defaultRate  = 10
	defaultBurst = 10
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
var defaultOutcomes = []outcome.Outcome{
	outcome.Denied, outcome.DenyCache, outcome.FallbackDenied,
	outcome.FailedClosed, outcome.FailedOpen, outcome.FallbackAllowed,
	outcome.LockedOut, outcome.ShadowDenied,
}

func defaultConfig() config {
	c := config{
		level:    slog.LevelInfo,
		errLevel: slog.LevelWarn,
		rate:     defaultRate,
		burst:    defaultBurst,
	}
	for _, o := range defaultOutcomes {
		c.outcomes |= 1 << o
	}
	return c
}

// WithOutcomes sets which outcomes are logged, by the names the metrics'
// outcome label uses, replacing the default: "denied", "deny_cache",
// "fallback_denied", "failed_closed", "failed_open", "fallback_allowed",
// "locked_out" and "shadow_denied" (every refusal of a Limiter, every
// decision the store did not make, and every denial shadow mode let
// through); "allowed", "canceled", "invalid", "allow_listed" and
// "deny_listed" are not logged unless listed here. No name, or a name
// that is none of these thirteen, is invalid.
func WithOutcomes(names ...string) Option {
	return func(c *config) error {
		if len(names) == 0 {
			return fmt.Errorf("%w: sloglimit.WithOutcomes: no outcome", core.ErrInvalidOption)
		}
		var set uint64
		for _, name := range names {
			o, ok := outcomeNamed(name)
			if !ok {
				return fmt.Errorf("%w: sloglimit.WithOutcomes: unknown outcome %q (want one of %s)", core.ErrInvalidOption, name, outcomeNames())
			}
			set |= 1 << o
		}
		c.outcomes = set
		return nil
	}
}

// outcomeNamed returns the Outcome whose String is name.
func outcomeNamed(name string) (outcome.Outcome, bool) {
	for _, o := range outcome.All() {
		if o < 64 && o.String() == name {
			return o, true
		}
	}
	return 0, false
}

// outcomeNames lists the names WithOutcomes takes.
func outcomeNames() string {
	var names []string
	for _, o := range outcome.All() {
		names = append(names, strconv.Quote(o.String()))
	}
	return strings.Join(names, ", ")
}

// WithLevels sets the level of each class of records: refusal for those
// whose event is not a store failure (denials, and the outcomes
// WithOutcomes adds), slog.LevelInfo by default; storeFailure for those
// whose event is a store failure, a store failure
// (failed_open, failed_closed and the fallback's decisions, timeouts and
// an open circuit breaker included), slog.LevelWarn by default.
func WithLevels(refusal, storeFailure slog.Level) Option {
	return func(c *config) error {
		c.level, c.errLevel = refusal, storeFailure
		return nil
	}
}

// WithSampling sets how many records a Logger writes, for each limit and
// class (denials; store failures): at most burst at once, then perSecond
// per second (a token bucket; over any span of t seconds, at most burst +
// perSecond*t records). The records it drops are counted, and the next
// record written carries the count. The default is 10 per second with a
// burst of 10. perSecond must be positive, finite and at
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

// WithKeys sets how client keys are shown (see KeyMode; the default is
// KeysSafe) and, when secret is not empty, keys the digest of "key_hash"
// with it (HMAC-SHA256 instead of SHA-256), so that a digest in the log
// cannot be checked against guessed keys (user IDs, e-mail addresses: keys
// with little entropy) without the secret. The secret is copied; KeysRaw
// and KeysHidden, which show no digest, do not use it.
func WithKeys(m KeyMode, secret []byte) Option {
	return func(c *config) error {
		if m >= numKeyModes {
			return fmt.Errorf("%w: sloglimit.WithKeys: unknown KeyMode(%d)", core.ErrInvalidOption, m)
		}
		c.keys = m
		c.keySecret = nil
		if len(secret) > 0 {
			c.keySecret = append([]byte(nil), secret...)
		}
		return nil
	}
}
