package memstore

import (
	"math/bits"
	"runtime"
	"time"
)

// Defaults and bounds of the options. New clamps every option value into
// these bounds instead of failing, since it returns no error.
const (
	// DefaultCleanupInterval is the janitor's period when
	// WithCleanupInterval is not given.
	DefaultCleanupInterval = time.Minute
	// MinCleanupInterval is the shortest janitor period; shorter values
	// are raised to it, so a typo cannot turn the janitor into a busy loop.
	MinCleanupInterval = time.Second
	// MaxShards is the largest number of shards.
	MaxShards = 1 << 16
	// DefaultMaxKeys is the number of keys a Store holds at most when
	// WithMaxKeys is not given: about 85 MB of state at 170 bytes per key
	// (an IP address under a window or bucket policy), 140 MB at most
	// with keys of core.MaxKeyLen bytes (plus, for the sliding window
	// log, 16 bytes per logged microsecond). It suits an API server whose
	// clients, times its policies, stay below 500,000 within a window;
	// beyond it the Store evicts instead of growing.
	DefaultMaxKeys = 500_000
)

// Option configures a Store.
type Option func(*config)

type config struct {
	shards   int
	maxKeys  int
	interval time.Duration
}

// WithShards sets the number of shards, each a map behind its own mutex.
// More shards mean less lock contention between goroutines deciding for
// different keys. n is rounded up to a power of two and clamped to
// [1, MaxShards]; n <= 0 keeps the default, the larger of 64 and four times
// GOMAXPROCS (rounded up to a power of two). When WithMaxKeys is smaller
// than the shard count, the shard count is lowered so that every shard may
// hold at least one key.
func WithShards(n int) Option {
	return func(c *config) { c.shards = n }
}

// WithMaxKeys bounds the number of keys (client key, policy) the Store
// holds; n <= 0 keeps DefaultMaxKeys. There is no unbounded setting: a
// client rotating keys (random IPv6 addresses, made-up API keys) creates
// one per request, so a Store without a bound grows at the attack's rate.
//
// Size n for the distinct clients each policy sees within its window (two
// windows for the sliding window counter, the time to refill for the
// buckets), summed over the policies sharing the Store, with some headroom:
// the bound is split evenly among the shards, and keys do not spread
// perfectly evenly over them. Each key costs about 170 bytes with a short
// client key (an IP address), up to 280 with a key of core.MaxKeyLen bytes,
// plus 16 bytes per logged microsecond for the sliding window log.
//
// A full shard makes room for a new key by evicting. It looks at a small
// sample of its keys, removes those whose state has expired and, when none
// has, the one whose loss forgets least: the smallest share of its policy's
// capacity still in use (a bucket's debt drains with time; a window's
// count is taken as of its last admission); among equals, the most
// recently admitted; then the one that expires soonest. A flood of new
// keys, each worth one request, thus mostly evicts itself: a client at its
// limit, such as a locked-out login, is evicted only when every key
// sampled with it holds back as much of its own policy, and was admitted
// earlier.
//
// An evicted client gets a fresh quota on its next request, exactly as if
// its state had expired. Under a flood of new keys, the store stays within
// its bound at the price of forgetting some clients early.
func WithMaxKeys(n int) Option {
	return func(c *config) { c.maxKeys = n }
}

// WithCleanupInterval sets how often the janitor goroutine removes expired
// state. It sweeps one shard at a time, under that shard's lock only, so
// decisions on the other shards never pause. d <= 0 keeps
// DefaultCleanupInterval; d below MinCleanupInterval is raised to it.
//
// The janitor sweeps at the Store's own clock (see Store). State written at
// explicit times (core.Request.Now) far in the past is reclaimed by the next
// sweep, as Redis would expire it; tests that drive a Store with explicit
// times should keep the default interval or a longer one.
func WithCleanupInterval(d time.Duration) Option {
	return func(c *config) { c.interval = d }
}

// newConfig applies opts over the defaults and clamps the result.
func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.shards <= 0 {
		c.shards = max(64, 4*runtime.GOMAXPROCS(0))
	}
	c.shards = min(ceilPow2(c.shards), MaxShards)
	if c.maxKeys <= 0 {
		c.maxKeys = DefaultMaxKeys
	}
	if c.maxKeys < c.shards {
		c.shards = floorPow2(c.maxKeys)
	}
	switch {
	case c.interval <= 0:
		c.interval = DefaultCleanupInterval
	case c.interval < MinCleanupInterval:
		c.interval = MinCleanupInterval
	}
	return c
}

// ceilPow2 returns the smallest power of two >= n, for 1 <= n <= MaxShards
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
