package core

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Health is the state of a Limiter's store, as the Limiter sees it.
type Health uint8

const (
	// Healthy: the store decides alone (a failure or two below the
	// breaker's threshold change nothing).
	Healthy Health = iota
	// Recovering: the store decides again after a failure, but not alone
	// yet. Only a Limiter with a fallback store recovers: until the
	// policy's state from the time of the failure can no longer matter (see
	// WithFallback), a request passes only when the fallback admits it
	// too. Without a fallback, a Limiter goes from Failing straight to
	// Healthy.
	Recovering
	// Failing: the circuit breaker is open; decisions are made without the
	// store, by the fallback or the policies' FailClosed, but for one probe
	// per 100 ms.
	Failing
)

// String returns "healthy", "recovering" or "failing".
func (h Health) String() string {
	switch h {
	case Healthy:
		return "healthy"
	case Recovering:
		return "recovering"
	case Failing:
		return "failing"
	}
	return fmt.Sprintf("Health(%d)", int(h))
}

// Health reports the state of the Limiter's store: Healthy, Failing while
// the circuit breaker is open, Recovering after a store failure while a
// fallback store still vouches for the store's admissions. Over a
// Partitioned store (a Redis Cluster), which has a breaker per partition,
// it is Failing while any partition's breaker is open (and a request has
// met it in its last 10 probe intervals). It is cheap enough to call on
// every request. It reads time.Now: a Limiter that AllowN drives at times
// of its own reports its health at the real time.
func (l *Limiter) Health() Health { return l.health(time.Time{}) }

// health is Health at the time at (a zero at: now).
func (l *Limiter) health(at time.Time) Health {
	w := l.brk.state.Load()
	if l.parts != nil && w&brkOpen == 0 && l.parts.failing(l.elapsed(at)) {
		w |= brkOpen
	}
	switch {
	case w&brkOpen != 0:
		return Failing
	case w&brkDegraded != 0 && l.brk.degraded(l.elapsed(at)):
		return Recovering
	}
	return Healthy
}

// The bits of breaker.state: the count of consecutive failures, the open
// breaker, the degraded period after a failure.
const (
	brkCount    = 1<<32 - 1
	brkOpen     = 1 << 32
	brkDegraded = 1 << 33
)

// breaker is a Limiter's view of its store's health. Its times are Unix
// nanoseconds (see Limiter.elapsed), negative for explicit times before
// 1970.
//
// The hot path reads state alone: 0 means a closed breaker, no failure
// counted, no degraded period. state changes only under mu; the probe
// fields and until are atomics of their own, so that an open breaker
// decides without a lock.
type breaker struct {
	state     atomic.Uint64
	probing   atomic.Bool  // a probe is in flight
	nextProbe atomic.Int64 // no probe starts before
	until     atomic.Int64 // the degraded period ends

	mu sync.Mutex

	threshold uint64 // failures that open the breaker; 0: never
	interval  int64  // between probes
	horizon   int64  // length of the degraded period; 0: none (no fallback)
}

// fail counts a store failure at now, opening the breaker at the
// threshold.
func (b *breaker) fail(now int64) {
	if b.threshold == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.state.Load()
	if w&brkOpen != 0 {
		return
	}
	n := w&brkCount + 1
	if n < b.threshold {
		b.state.Store(w&^brkCount | n)
		return
	}
	b.nextProbe.Store(addSat(now, b.interval))
	b.state.Store(w&brkDegraded | brkOpen)
}

// succeed clears the count of failures after a store success, unless the
// breaker has opened meanwhile: only a probe closes it.
func (b *breaker) succeed() {
	b.mu.Lock()
	if w := b.state.Load(); w&brkOpen == 0 && w&brkCount != 0 {
		b.state.Store(w &^ brkCount)
	}
	b.mu.Unlock()
}

// tryProbe reports whether the request at now, which found the breaker
// open, is to probe the store; if so, it must call probed once the store
// has answered.
func (b *breaker) tryProbe(now int64) bool {
	if now < b.nextProbe.Load() || !b.probing.CompareAndSwap(false, true) {
		return false
	}
	// Another probe may have come and gone since the first check.
	if now < b.nextProbe.Load() {
		b.probing.Store(false)
		return false
	}
	b.nextProbe.Store(addSat(now, b.interval))
	return true
}

// probed ends a probe at now: if the store answered, the breaker closes.
func (b *breaker) probed(ok bool, now int64) {
	if ok {
		b.mu.Lock()
		if w := b.state.Load(); w&brkOpen != 0 {
			w &^= brkOpen | brkCount
			if b.horizon > 0 {
				b.extend(now)
				w |= brkDegraded
			}
			b.state.Store(w)
		}
		b.mu.Unlock()
	}
	b.probing.Store(false)
}

// degrade starts or extends the degraded period, for a decision made at
// now without the store. It is a no-op without a fallback.
func (b *breaker) degrade(now int64) {
	if b.horizon == 0 {
		return
	}
	if b.state.Load()&brkDegraded != 0 && b.end(now) <= b.until.Load() {
		return // the common case while the store is down: no lock
	}
	b.mu.Lock()
	b.extend(now)
	b.state.Store(b.state.Load() | brkDegraded)
	b.mu.Unlock()
}

// extend moves the end of the degraded period to at least now + horizon,
// or sets it if no period lasts. The caller holds mu.
func (b *breaker) extend(now int64) {
	if e := b.end(now); b.state.Load()&brkDegraded == 0 || e > b.until.Load() {
		b.until.Store(e)
	}
}

// end is the end of a degraded period that starts at now, rounded up to a
// millisecond so that an outage moves it (and takes the lock) at most once
// per millisecond.
func (b *breaker) end(now int64) int64 {
	const ms = int64(time.Millisecond)
	if now > math.MaxInt64-b.horizon-ms {
		return math.MaxInt64
	}
	e := now + b.horizon
	if r := e % ms; r > 0 {
		e += ms - r
	} else if r < 0 {
		e -= r
	}
	return e
}

// addSat is a+b, b >= 0, saturated at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// degraded reports whether the degraded period lasts at now, ending it
// once it has passed. The caller has seen brkDegraded.
func (b *breaker) degraded(now int64) bool {
	if now < b.until.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now < b.until.Load() {
		return true
	}
	b.state.Store(b.state.Load() &^ brkDegraded)
	return false
}

// horizon is how long after a decision the state it leaves in a store can
// still change another decision: a window for the fixed window (the first
// window that starts after it) and the log; two for the sliding counter,
// which weighs the previous window; for the buckets, the time a full
// bucket takes to refill or drain, Capacity/Limit windows. It saturates
// at a third of the int64 range, which is forever.
func horizon(p Policy) time.Duration {
	const forever = math.MaxInt64 / 3
	switch p.Algorithm {
	case SlidingWindowCounter:
		return 2 * p.Window
	case TokenBucket, LeakyBucket:
		h := math.Ceil(float64(p.Window) * float64(p.capacity()) / float64(p.Limit))
		if h >= forever {
			return forever
		}
		return time.Duration(h)
	}
	return p.Window
}
