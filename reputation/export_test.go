package reputation

import "time"

// OnOutcome sets fn to hear what t did of each signal it scored: the
// client's key, the signal, the score after it, the band it is in ("":
// none) and whether t acted (banned it).
func OnOutcome(t *Tracker, fn func(key string, s Signal, score float64, band string, acted bool)) {
	t.onOutcome = fn
}

// Shared is a set of shared scores, as a Tracker keeps them, for the
// tests of its copy and its writes behind.
type Shared = shared

// NewShared returns the set of scores under keys set+key in remote,
// halving every halfLife, with a copy of at most maxKeys.
func NewShared(remote SharedScores, set string, halfLife time.Duration, maxKeys int) (*Shared, error) {
	return newShared(remote, set, halfLife, maxKeys)
}

// FlushEvery and SyncTimeout are the flusher's period and a Sync's
// bound.
const (
	FlushEvery  = flushEvery
	SyncTimeout = syncTimeout
)

// OnShared sets fn to hear every key a flush sent, with its score before
// and after, and onError the errors of Syncs and flushes.
func (r *shared) OnShared(fn func(key string, before, after float64), onError func(error)) {
	r.onShared, r.onError = fn, onError
}

// HoldFlusher keeps the flusher from starting (true) until released
// (false), so that a test's Flush sends what it queued.
func (r *shared) HoldFlusher(hold bool) { r.running.Store(hold) }

// Idle reports whether the flusher has sent everything and stopped.
func (r *shared) Idle() bool { return !r.running.Load() && !r.queued() }

// Last returns key's score in the copy, as of its last signal.
func (r *shared) Last(key string) float64 {
	e, _ := r.copy.Last(key)
	return e.V
}

// Queued returns how many keys wait for a flush, and whether every shard
// of the queue is within its bound.
func (r *shared) Queued() (n int, bounded bool) {
	bounded = true
	for i := range r.queues {
		q := &r.queues[i]
		q.mu.Lock()
		n += len(q.m)
		bounded = bounded && len(q.m) <= q.max
		q.mu.Unlock()
	}
	return n, bounded
}

// CopyLen returns how many keys the copy holds.
func (r *shared) CopyLen() int { return r.copy.Len() }
