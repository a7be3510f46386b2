package memstore

import (
	"fmt"
	"math/bits"
	"runtime"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Defaults and bounds of the options. New refuses a value out of these
// bounds with an error wrapping core.ErrInvalidOption.
const (
	// defaultCleanupInterval is the janitor's period when
	// withCleanupInterval is not given: a minute.
	defaultCleanupInterval = time.Minute
	// minCleanupInterval is the shortest janitor period, a second, so
	// that a typo cannot turn the janitor into a busy loop.
	minCleanupInterval = time.Second
	// maxShards is the largest number of shards, 65,536.
	maxShards = 1 << 16
	// defaultMaxKeys is the number of keys a Store holds at most when
	// WithMaxKeys is not given, 500,000: about 80 MB of state at 160 bytes per key
	// (an IP address under a window or bucket policy), 140 MB at most
	// with keys of 128 bytes (plus, for the sliding window
	// log, 16 bytes per logged microsecond). It suits an API server whose
	// clients, times its policies, stay below 500,000 within a window;
	// beyond it the Store evicts instead of growing.
	defaultMaxKeys = 500_000
)

// Option configures a Store. New applies the options in order and returns
// the error of the first that refuses its value; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	shards   int // 0: not given, the default
	maxKeys  int
	interval time.Duration
}

// WithShards sets the number of shards, each a map behind its own mutex.
// More shards mean less lock contention between goroutines deciding for
// different keys. n must be in [1, 65536], and at most the WithMaxKeys
// bound, so that every shard may hold a key. It is rounded up to a power
// of two, or down when rounding up would pass that bound. Without it, the
// Store has the larger of 64 and four times GOMAXPROCS, rounded up to a
// power of two (and at most 65,536), and fewer when WithMaxKeys is
// smaller.
func WithShards(n int) Option {
	return func(c *config) error {
		if n < 1 || n > maxShards {
			return fmt.Errorf("%w: memstore.WithShards: %d is out of [1, %d]", core.ErrInvalidOption, n, maxShards)
		}
		c.shards = n
		return nil
	}
}

// WithMaxKeys bounds the number of keys (client key, policy) the Store
// holds; n must be at least 1, and 500,000 applies without it. There is
// no unbounded setting: a client rotating keys (random IPv6 addresses,
// made-up API keys) creates one per request.
//
// Size n for the distinct clients each policy sees within its window (two
// windows for the sliding window counter, the time to refill for the
// buckets), summed over the policies sharing the Store, with headroom:
// the bound is split evenly among the shards. A key costs about 160 bytes
// with an IP address as client key, about 280 with one of 128 bytes, plus
// 16 bytes per logged microsecond for the sliding window log.
//
// A full shard evicts expired state first, then the state whose loss
// forgets least (see docs/algorithms.md), so that a flood of new keys
// mostly evicts itself rather than a client at its limit. An evicted
// client gets a fresh quota, as if its state had expired.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: memstore.WithMaxKeys: %d is not positive", core.ErrInvalidOption, n)
		}
		c.maxKeys = n
		return nil
	}
}

// withCleanupInterval sets how often the janitor goroutine removes expired
// state (a minute unless the package's tests say otherwise): d must be at
// least a second. The janitor sweeps one shard at a time, under that
// shard's lock only, so decisions on the other shards never pause. It
// sweeps at the Store's own clock (see Store): state written at explicit
// times (Take's now) far in the past is reclaimed by the next sweep, as
// Redis would expire it.
func withCleanupInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < minCleanupInterval {
			return fmt.Errorf("%w: memstore.WithCleanupInterval: %v is under %v", core.ErrInvalidOption, d, minCleanupInterval)
		}
		c.interval = d
		return nil
	}
}

// newConfig applies opts over the defaults. It returns the error of the
// first option that refuses its value, or of a shard count above the key
// bound.
func newConfig(opts []Option) (config, error) {
	c := config{maxKeys: defaultMaxKeys, interval: defaultCleanupInterval}
	for i, opt := range opts {
		if opt == nil {
			return config{}, fmt.Errorf("%w: memstore.New: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return config{}, err
		}
	}
	switch {
	case c.shards > c.maxKeys:
		return config{}, fmt.Errorf("%w: memstore.WithShards: %d shards for %d keys (WithMaxKeys) would leave a shard that holds none",
			core.ErrInvalidOption, c.shards, c.maxKeys)
	case c.shards > 0:
		c.shards = ceilPow2(c.shards)
	default:
		c.shards = min(ceilPow2(max(64, 4*runtime.GOMAXPROCS(0))), maxShards)
	}
	if c.shards > c.maxKeys {
		// The default count, or n rounded up past the bound.
		c.shards = floorPow2(c.maxKeys)
	}
	return c, nil
}

// ceilPow2 returns the smallest power of two >= n, for 1 <= n <= maxShards
// and beyond (it saturates at 1<<62).
func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	if n > 1<<62 {
		return 1 << 62
	}
	return 1 << bits.Len64(uint64(n-1))
}

// floorPow2 returns the largest power of two <= n, for n >= 1.
func floorPow2(n int) int {
	return 1 << (bits.Len64(uint64(n)) - 1)
}
