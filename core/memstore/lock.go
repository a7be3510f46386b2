package memstore

import (
	"runtime"
	"sync"
)

// shardLock is a shard's mutex: a sync.Mutex taken by spinning briefly
// before sleeping.
//
// A decision holds its shard for some tens of nanoseconds. When goroutines
// outnumber the CPUs (16 request goroutines on 2, say), sync.Mutex does not
// spin for a lock held by a running goroutine once its P has other work:
// the loser of a collision sleeps on the runtime's semaphore, and waking it
// costs more than the critical section it waited for. Under a hot key the
// sleepers pile up behind the lock, and the CPUs take turns instead of
// deciding side by side. shardLock retries for about the length of a
// decision first, then yields its P a few times, and only then sleeps in
// sync.Mutex.Lock, so that a lock held long (the janitor sweeping a large
// shard) still costs its waiters no CPU.
type shardLock struct {
	mu sync.Mutex
}

const (
	// lockSpins is how many times Lock retries before yielding: about the
	// time a decision holds the lock, on a lock held by a running
	// goroutine.
	lockSpins = 64
	// lockYields is how many times Lock yields its P before it sleeps.
	lockYields = 4
)

// Lock locks l.
func (l *shardLock) Lock() {
	if !l.mu.TryLock() {
		l.lockSlow()
	}
}

// lockSlow spins, then yields, then sleeps until it holds l.
func (l *shardLock) lockSlow() {
	for range lockSpins {
		if l.mu.TryLock() {
			return
		}
	}
	for range lockYields {
		runtime.Gosched()
		if l.mu.TryLock() {
			return
		}
	}
	l.mu.Lock()
}

// Unlock unlocks l, which the caller holds.
func (l *shardLock) Unlock() { l.mu.Unlock() }
