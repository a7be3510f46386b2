package redisoverrides

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Defaults of the options.
const (
	// DefaultKey is the hash a Watcher watches unless WithKey says
	// otherwise.
	DefaultKey = "rl:overrides"
	// DefaultPollInterval is how often a Watcher reads the hash: a change
	// is in force on every app server within about this long.
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultMaxFields is the most fields a Watcher accepts in the hash.
	DefaultMaxFields = 10_000
)

// Bounds of the options.
const (
	// MinPollInterval bounds WithPollInterval from below.
	MinPollInterval = 10 * time.Millisecond
	// MaxPollInterval bounds WithPollInterval from above: a second, so
	// that a change is seen within a second.
	MaxPollInterval = time.Second
	// MaxMaxFields bounds WithMaxFields.
	MaxMaxFields = 100_000
	// MaxKeyLen bounds WithKey.
	MaxKeyLen = 256
)

// Option configures [New]. New applies the options in order and returns
// the error of the first that refuses its value; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	key       string
	marker    string
	poll      time.Duration
	maxFields int
	logger    *slog.Logger // nil: slog.Default() at the time of logging
}

func defaults() config {
	return config{key: DefaultKey, marker: markerOf(DefaultKey), poll: DefaultPollInterval, maxFields: DefaultMaxFields}
}

func (c *config) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

// WithKey sets the hash watched; the default is DefaultKey. Every app
// server that shares overrides uses the same key. The marker key (see the
// package doc) is key+":alive" when key has a hash tag ("{rl}:overrides"
// gives "{rl}:overrides:alive"), else "{"+key+"}:alive"
// ("{rl:overrides}:alive"), so that both sit in one Redis Cluster slot.
// An empty key, one over MaxKeyLen bytes, one with an ASCII control byte,
// or one with a brace but no hash tag is an error.
func WithKey(key string) Option {
	return func(c *config) error {
		bad := func(why string) error {
			return fmt.Errorf("%w: redisoverrides.WithKey: %q: %s", core.ErrInvalidOption, clip(key), why)
		}
		switch {
		case key == "" || len(key) > MaxKeyLen:
			return bad(fmt.Sprintf("a key has 1 to %d bytes, not %d", MaxKeyLen, len(key)))
		case strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
			return bad("a control byte")
		case strings.ContainsAny(key, "{}") && tagOf(key) == "":
			return bad(`braces that are no hash tag; give a tag ("{rl}:overrides") or no brace`)
		}
		c.key, c.marker = key, markerOf(key)
		return nil
	}
}

// WithPollInterval sets how often the hash is read, from MinPollInterval
// to MaxPollInterval; the default is DefaultPollInterval. Each read is one
// EVALSHA, which sends the fields only when the hash changed.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinPollInterval || d > MaxPollInterval {
			return fmt.Errorf("%w: redisoverrides.WithPollInterval: %v is out of range [%v, %v]",
				core.ErrInvalidOption, d, MinPollInterval, MaxPollInterval)
		}
		c.poll = d
		return nil
	}
}

// WithMaxFields sets the most fields the hash may have, from 1 to
// MaxMaxFields; the default is DefaultMaxFields. A hash with more is
// refused whole: the Watcher logs it and keeps its last good overrides,
// and no field crosses the network.
func WithMaxFields(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxMaxFields {
			return fmt.Errorf("%w: redisoverrides.WithMaxFields: %d is out of range [1, %d]", core.ErrInvalidOption, n, MaxMaxFields)
		}
		c.maxFields = n
		return nil
	}
}

// WithLogger sets where a Watcher logs: an outage of Redis and its end, a
// malformed field, an override that cannot apply to its layer's policy, a
// hash with too many fields, overrides written back after Redis lost
// them. Without it, it logs to slog.Default() as it is
// at the time of logging; a nil l is an error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: redisoverrides.WithLogger: nil logger; leave the option out for slog.Default()", core.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// tagOf returns key's Redis Cluster hash tag, or "" when it has none: what
// lies between its first '{' and the first '}' after it, when not empty.
func tagOf(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}

// markerOf returns the marker key of the hash key, in the same slot: a
// key without a tag hashes as a tag of the whole key would.
func markerOf(key string) string {
	if tagOf(key) != "" {
		return key + ":alive"
	}
	return "{" + key + "}:alive"
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
