package rediswatch

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Option configures [NewBans], [NewOverrides] and [NewScores] (which
// takes WithKey only). They apply the options in order and return the error of the first that refuses its value, or
// of a value out of the watcher's own range; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

// config is what the options set; a zero field means the watcher's
// default (see kind).
type config struct {
	key    string
	poll   time.Duration
	max    int
	resync time.Duration // Bans only: how often it reloads every ban
	logger *slog.Logger  // nil: slog.Default() at the time of logging
	// now is this server's clock, time.Now; a test shifts it to play a
	// server whose clock is off Redis's.
	now func() time.Time
	// page, if set, is called after each page a load reads (Bans only),
	// so that a test may change the bans in the middle of a load.
	page func()
}

func (c *config) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

// maxKeyLen bounds WithKey.
const maxKeyLen = 256

// WithKey sets the Redis key watched. Every server that shares bans, or
// overrides, gives the same key; the defaults are those of the packages
// before this one, so that servers of both versions share the data.
//
// For Bans (default "ratelimit:bans") it is the hash tag of every key a
// Bans writes: "{ratelimit:bans}:i", "{ratelimit:bans}:b:<id>", and so on
// (see the package doc), so that all of them sit in one Redis Cluster
// slot; it may hold no brace. For Overrides (default "rl:overrides") it
// is the hash itself; its marker key is key+":alive" when key has a hash
// tag ("{rl}:overrides" gives "{rl}:overrides:alive"), else
// "{"+key+"}:alive" ("{rl:overrides}:alive"), in the hash's slot; it may
// hold braces only as a hash tag. For Scores (default "ratelimit:rep")
// it starts every key (see NewScores).
//
// A key that is empty, over 256 bytes, or has an ASCII control byte is an
// error, as is one with braces that the watcher does not take.
func WithKey(key string) Option {
	return func(c *config) error {
		switch {
		case key == "" || len(key) > maxKeyLen:
			return fmt.Errorf("%w: rediswatch.WithKey: a key has 1 to %d bytes, not %d", core.ErrInvalidOption, maxKeyLen, len(key))
		case strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
			return fmt.Errorf("%w: rediswatch.WithKey: %s has a control byte", core.ErrInvalidOption, clip(key))
		}
		c.key = key
		return nil
	}
}

// WithPollInterval sets how often the watcher reads Redis: a change made
// on one server is in force on all of them within about this long. Each
// poll is one script call, as cheap as a GET when nothing changed. Bans
// takes 10 ms to a minute (default 200 ms), Overrides 10 ms to a second
// (default 250 ms), so that an override is seen within a second.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < minPoll || d > time.Minute {
			return fmt.Errorf("%w: rediswatch.WithPollInterval: %v is out of range [%v, 1m]", core.ErrInvalidOption, d, minPoll)
		}
		c.poll = d
		return nil
	}
}

// minPoll bounds WithPollInterval from below.
const minPoll = 10 * time.Millisecond

// WithMax sets the most entries the watcher holds. Every server sharing
// the key should have the same.
//
// For Bans, from 1 to 1,000,000 (default 100,000): the most bans loaded
// from Redis, and the most a Ban lets the index hold (a ban past it wraps
// access.ErrTooLarge). A load that finds more loads the permanent bans,
// then those that expire last, and logs a warning. A change costs every
// server time in proportion to the change, not to the bans held; a full
// load (at start, every minute, or for a server that fell more than
// 10,000 changes behind) takes about half a second with 100,000 bans and
// allocates about 60 MB (BenchmarkStartup, 2 cores, Redis on loopback).
//
// For Overrides, from 1 to 100,000 (default 10,000): the most fields of
// the hash. A hash with more is refused whole: logged, the last good
// overrides kept, no field sent over the network.
func WithMax(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: rediswatch.WithMax: %d is not positive", core.ErrInvalidOption, n)
		}
		c.max = n
		return nil
	}
}

// WithLogger sets where the watcher logs: an outage of Redis and its end,
// malformed data found in Redis, more entries than WithMax, data written
// back after Redis lost it. Without it, it logs to slog.Default() as it is
// at the time of logging; a nil l is an error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: rediswatch.WithLogger: nil logger; leave the option out for slog.Default()", core.ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// withResyncInterval sets how often a Bans reloads every ban although the
// log says nothing else changed, to follow changes made to Redis by hand
// or keys evicted: from a second to a day, a minute by default. Tests
// turn it.
func withResyncInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second || d > 24*time.Hour {
			return fmt.Errorf("%w: rediswatch: resync interval %v is out of range [1s, 24h]", core.ErrInvalidOption, d)
		}
		c.resync = d
		return nil
	}
}

// kind is what one watcher takes of the options: its defaults and bounds.
type kind struct {
	name       string // the constructor, for errors
	key        string // the default key
	checkKey   func(string) error
	poll, most time.Duration
	max, top   int // the default and the bound of WithMax
}

// configure applies opts over k's defaults and checks them against k's
// bounds.
func configure(k kind, client any, opts []Option) (config, error) {
	if err := checkClient(k.name, client); err != nil {
		return config{}, err
	}
	var c config
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: rediswatch.%s: option %d is nil", core.ErrInvalidOption, k.name, i)
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	switch {
	case c.key == "":
		c.key = k.key
	case k.checkKey != nil:
		if err := k.checkKey(c.key); err != nil {
			return config{}, fmt.Errorf("%w: rediswatch.%s: key %s: %w", core.ErrInvalidOption, k.name, clip(c.key), err)
		}
	}
	switch {
	case c.poll == 0:
		c.poll = k.poll
	case c.poll > k.most:
		return config{}, fmt.Errorf("%w: rediswatch.%s: poll interval %v is out of range [%v, %v]", core.ErrInvalidOption, k.name, c.poll, minPoll, k.most)
	}
	switch {
	case c.max == 0:
		c.max = k.max
	case c.max > k.top:
		return config{}, fmt.Errorf("%w: rediswatch.%s: max %d is out of range [1, %d]", core.ErrInvalidOption, k.name, c.max, k.top)
	}
	if c.resync == 0 {
		c.resync = time.Minute
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}
