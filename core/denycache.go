package core

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// WithDenyCache makes the Limiter remember, for up to maxKeys clients, the
// denials its store returned, and answer the same client's requests from
// memory until the remembered RetryAfter has passed, without asking the
// store (Source SourceDenyCache): a flood from one client then costs no
// Redis round trip. maxKeys must be positive; when maxKeys denials are
// remembered, further ones are not until some expire.
//
// A remembered denial (a lockout's too, LockedOut kept) answers only
// requests at least as costly as the one denied, with the store's
// Remaining and its RetryAfter counting down. Reset forgets the key here too, but a Reset
// made through another process is seen only once that RetryAfter has
// passed.
func WithDenyCache(maxKeys int) Option {
	// Denied requests change no state, so the store would have answered
	// the same. A cheaper request than the one denied may fit sooner,
	// hence the cost rule, which a lockout's denial keeps too, though the
	// store would deny any cost. Once Reset has
	// returned, no denial from before it is served, even one the store
	// returned concurrently.
	return func(c *config) error {
		if maxKeys < 1 {
			return fmt.Errorf("%w: deny cache size %d is not positive", ErrInvalidOption, maxKeys)
		}
		c.denyCacheKeys = maxKeys
		return nil
	}
}

// denyCache holds the denials of a Limiter's store until their RetryAfter.
//
// Its generation counts Resets: a decision reads it before asking the
// store, and its denial is remembered only if no Reset has ended since, so
// that a denial the store made before a Reset, but which reaches the cache
// after it, is never served.
type denyCache struct {
	gen atomic.Uint64 // changed only under mu
	mu  sync.Mutex
	max int
	m   map[string]denial
}

// denial is one remembered denial, its times on the Limiter's clock.
type denial struct {
	cost           int64
	remaining      int64
	until, resetAt time.Time
	lockedOut      bool
	// limit, burst and window are the policy's the denial was made
	// under: a policy changed since (WithPolicySource) is asked anew.
	limit, burst int64
	window       time.Duration
}

// get returns the remembered denial of a request of cost for key at now.
func (c *denyCache) get(key string, cost int64, now time.Time, p *Policy, d *Decision) bool {
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok || cost < e.cost || !now.Before(e.until) || e.limit != p.Limit || e.burst != p.Burst || e.window != p.Window {
		return false
	}
	retry := msCeil(e.until.Sub(now))
	d.Remaining, d.RetryAfter = e.remaining, retry
	d.ResetAfter = max(retry, msCeil(e.resetAt.Sub(now)))
	d.Source, d.LockedOut = SourceDenyCache, e.lockedOut
	return true
}

// generation returns the count of Resets, to pass to put.
func (c *denyCache) generation() uint64 { return c.gen.Load() }

// put remembers d, a denial of a request of cost for key at now, unless a
// Reset has ended since gen was read, before the store was asked. The key
// is copied, on every put (a map assignment keeps the newest key string):
// the caller's may live in a buffer that is reused (zero-copy strings, as
// in Fiber). Lookups copy nothing.
func (c *denyCache) put(key string, cost int64, now time.Time, d Decision, gen uint64) {
	e := denial{cost: cost, remaining: d.Remaining, until: now.Add(d.RetryAfter), resetAt: now.Add(d.ResetAfter), lockedOut: d.LockedOut,
		limit: d.Policy.Limit, burst: d.Policy.Burst, window: d.Policy.Window}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		// Full: drop the expired among a sample (map iteration starts at
		// random), so that a full cache costs bounded work per denial.
		seen := 0
		for k, old := range c.m {
			if !now.Before(old.until) {
				delete(c.m, k)
			}
			if seen++; seen == denySample {
				break
			}
		}
		if len(c.m) >= c.max {
			return
		}
	}
	c.m[strings.Clone(key)] = e
}

// denySample bounds the entries a full cache looks at to make room.
const denySample = 64

// reset drops key's denial and starts a new generation, once the store
// has forgotten key.
func (c *denyCache) reset(key string) {
	c.mu.Lock()
	c.gen.Add(1)
	delete(c.m, key)
	c.mu.Unlock()
}

// msCeil rounds d up to a whole millisecond, as every Decision is.
func msCeil(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}
