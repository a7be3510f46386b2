package httplimit

import (
	"sync"
	"time"
)

// The quota endpoint's own limit, per client address, in process: a
// token bucket of quotaBurst requests, refilled one each quotaEvery (10 a
// second, in bursts of 20).
const (
	quotaBurst = 20
	quotaEvery = 100 * time.Millisecond
	// quotaAddrs bounds the addresses the guard remembers (a few MB): a
	// flood of new addresses forgets the oldest, each of which then has
	// its burst again, which costs the store what any request costs (one
	// peek).
	quotaAddrs = 100_000
)

// quotaGuard limits the quota endpoint per client address: a token bucket
// for each, kept as the time at which it is full again (GCRA), in two
// generations of at most quotaAddrs/2 addresses, the older dropped when
// the newer is full. It is safe for concurrent use.
type quotaGuard struct {
	mu        sync.Mutex
	epoch     time.Time        // the guard's zero, a reading of the monotonic clock
	cur, prev map[string]int64 // address: when its bucket is full, since epoch
}

func newQuotaGuard(now time.Time) *quotaGuard {
	return &quotaGuard{epoch: now, cur: make(map[string]int64)}
}

// allow takes one request of addr's bucket at now, and reports whether it
// had one; if not, how long until it has.
func (g *quotaGuard) allow(addr string, now time.Time) (bool, time.Duration) {
	t := int64(now.Sub(g.epoch))
	g.mu.Lock()
	defer g.mu.Unlock()
	full, ok := g.cur[addr]
	if !ok {
		full = g.prev[addr] // 0, a full bucket, when neither has it
	}
	next := max(full, t) + int64(quotaEvery)
	if over := next - t - quotaBurst*int64(quotaEvery); over > 0 {
		return false, time.Duration(over)
	}
	if !ok && len(g.cur) >= quotaAddrs/2 {
		g.prev, g.cur = g.cur, make(map[string]int64, quotaAddrs/2)
	}
	g.cur[addr] = next
	return true, 0
}
