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
// holds; n <= 0 means unbounded, the default. The bound is split evenly
// among the shards, and a full shard makes room for a new key by evicting:
// it looks at a small sample of its keys (in the map's random iteration
// order), removes those whose state has expired and, when none has, the one
// whose state would expire soonest. Leave some headroom above the number of
// clients you expect: keys do not spread perfectly evenly over the shards.
//
// An evicted client gets a fresh quota on its next request, exactly as if
// its state had expired. Under a flood of new keys, the store stays within
// its bound at the price of forgetting some clients early.
func WithMaxKeys(n int) Option {
	return func(c *config) { c.maxKeys = max(0, n) }
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
	if c.maxKeys > 0 && c.maxKeys < c.shards {
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
