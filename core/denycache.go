package core

import (
	"fmt"
	"sync"
	"time"
)

// WithDenyCache makes the Limiter remember, for up to maxKeys clients, the
// denials its store returned, and answer the same client's requests from
// memory until the remembered RetryAfter has passed, without asking the
// store. Denied requests change no state, so the store would have answered
// the same: a flood from one client then costs no Redis round trip.
//
// A remembered denial answers only requests at least as costly as the one
// denied (a cheaper one may fit sooner). Its RetryAfter counts down from
// the store's; its Remaining is the store's at the time of the denial.
// Reset forgets the key here too, but a Reset made through another process
// is seen only once the remembered RetryAfter has passed. When maxKeys
// denials are remembered, further ones are not until some expire.
func WithDenyCache(maxKeys int) Option {
	return func(l *Limiter) error {
		if maxKeys < 1 {
			return fmt.Errorf("%w: deny cache size %d is not positive", ErrInvalidOption, maxKeys)
		}
		l.denied = &denyCache{max: maxKeys, m: make(map[string]denial)}
		return nil
	}
}

// denyCache holds the denials of a Limiter's store until their RetryAfter.
type denyCache struct {
	mu  sync.Mutex
	max int
	m   map[string]denial
}

// denial is one remembered denial, its times on the Limiter's clock.
type denial struct {
	cost           int64
	remaining      int64
	until, resetAt time.Time
}

// get returns the remembered denial of a request of cost for key at now.
func (c *denyCache) get(key string, cost int64, now time.Time) (Decision, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if !ok || cost < e.cost || !now.Before(e.until) {
		return Decision{}, false
	}
	retry := msCeil(e.until.Sub(now))
	return Decision{
		Remaining:  e.remaining,
		ResetAfter: max(retry, msCeil(e.resetAt.Sub(now))),
		RetryAfter: retry,
		Cached:     true,
	}, true
}

// put remembers d, a denial of a request of cost for key at now.
func (c *denyCache) put(key string, cost int64, now time.Time, d Decision) {
	e := denial{cost: cost, remaining: d.Remaining, until: now.Add(d.RetryAfter), resetAt: now.Add(d.ResetAfter)}
	c.mu.Lock()
	defer c.mu.Unlock()
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
	c.m[key] = e
}

// denySample bounds the entries a full cache looks at to make room.
const denySample = 64

// forget drops key's denial.
func (c *denyCache) forget(key string) {
	c.mu.Lock()
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
