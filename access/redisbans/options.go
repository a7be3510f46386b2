package redisbans

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Defaults of the options.
const (
	// DefaultPrefix is the hash tag of every key the Bans writes, unless
	// WithPrefix says otherwise.
	DefaultPrefix = "ratelimit:bans"
	// DefaultPollInterval is how often a Bans reads the log from Redis: a
	// ban made on one server is in force on all of them within about this
	// long.
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultResyncInterval is how often a Bans reloads every ban although
	// the log says nothing else changed, to follow changes made to Redis
	// by hand or keys evicted.
	DefaultResyncInterval = time.Minute
	// DefaultMaxBans is the most bans loaded, and the most a Ban lets the
	// index hold, unless WithMaxBans says otherwise.
	DefaultMaxBans = 100_000
	// DefaultStartTimeout bounds the first load that New makes.
	DefaultStartTimeout = 5 * time.Second
)

// Option configures [New]. New applies the options in order and returns
// the error of the first that refuses its value; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	prefix       string
	poll         time.Duration
	resync       time.Duration
	maxBans      int
	startTimeout time.Duration
	logger       *slog.Logger // nil: slog.Default() at the time of logging
	// now is this server's clock, time.Now; a test shifts it to play a
	// server whose clock is off Redis's.
	now func() time.Time
}

func defaults() config {
	return config{
		prefix:       DefaultPrefix,
		poll:         DefaultPollInterval,
		resync:       DefaultResyncInterval,
		maxBans:      DefaultMaxBans,
		startTimeout: DefaultStartTimeout,
		now:          time.Now,
	}
}

func (c *config) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

// WithPrefix sets the name of the keys' hash tag: every key is
// "{prefix}:" and a suffix, so that all of them sit in one Redis Cluster
// slot and each script touches one slot. Servers that share bans use the
// same prefix; the default is DefaultPrefix. An empty prefix (Redis would
// ignore an empty hash tag), one over 256 bytes, or one with '{', '}' or
// an ASCII control byte is an error.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if p == "" || len(p) > 256 {
			return fmt.Errorf("%w: redisbans.WithPrefix: the prefix must have 1 to 256 bytes, not %d", core.ErrInvalidOption, len(p))
		}
		if i := strings.IndexFunc(p, func(r rune) bool { return r == '{' || r == '}' || r < 0x20 || r == 0x7f }); i >= 0 {
			return fmt.Errorf("%w: redisbans.WithPrefix: %q has %q at byte %d; braces and control bytes are not allowed",
				core.ErrInvalidOption, p, p[i], i)
		}
		c.prefix = p
		return nil
	}
}

// WithPollInterval sets how often the log is read, from 10 ms to a
// minute; the default is DefaultPollInterval. Each poll is one script
// call, which reads one key when nothing changed.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: redisbans.WithPollInterval: %v is out of range [10ms, 1m]", core.ErrInvalidOption, d)
		}
		c.poll = d
		return nil
	}
}

// WithResyncInterval sets how often every ban is reloaded although the
// log says nothing else changed, from a second to a day; the default is
// DefaultResyncInterval. A reload of 100,000 bans takes about half a
// second, a fraction of it this process's CPU.
func WithResyncInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second || d > 24*time.Hour {
			return fmt.Errorf("%w: redisbans.WithResyncInterval: %v is out of range [1s, 24h]", core.ErrInvalidOption, d)
		}
		c.resync = d
		return nil
	}
}

// WithMaxBans sets the most bans loaded from Redis, and the most that Ban
// lets the index hold (a ban past it is ErrTooManyBans), from 1 to
// 1,000,000; the default is DefaultMaxBans. Every server sharing bans
// should have the same. A load that finds more loads the permanent bans,
// then those that expire last, and logs a warning.
//
// A change costs the server that makes it, and every other, time in
// proportion to the change, not to the bans held (BenchmarkBan,
// BenchmarkPropagation: well under a millisecond with 100,000 held); a
// full load, at start, every resync interval, or for a server that fell
// more than 10,000 changes behind, takes about half a second with 100,000
// bans and allocates about 60 MB (BenchmarkStartup, 2 cores, Redis on
// loopback).
func WithMaxBans(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 1_000_000 {
			return fmt.Errorf("%w: redisbans.WithMaxBans: %d is out of range [1, 1000000]", core.ErrInvalidOption, n)
		}
		c.maxBans = n
		return nil
	}
}

// WithStartTimeout bounds the first load that New makes, from 10 ms to a
// minute; the default is DefaultStartTimeout.
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: redisbans.WithStartTimeout: %v is out of range [10ms, 1m]", core.ErrInvalidOption, d)
		}
		c.startTimeout = d
		return nil
	}
}

// WithLogger sets where a Bans logs: an outage of Redis and its end,
// malformed bans found in Redis, a load that found more bans than
// WithMaxBans. Without it, it logs to slog.Default() as it is at the time
// of logging; a nil l is an error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: redisbans.WithLogger: nil logger; leave the option out for slog.Default()", core.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}
