package memstore

import (
	"runtime"
	"sync/atomic"
)

// shardLock is a shard's mutex: it spins briefly, then yields, and only
// then sleeps, and it never hands itself over to a sleeper. Its zero value
// is unlocked.
//
// A decision holds its shard for some tens of nanoseconds. When goroutines
// outnumber the CPUs (16 request goroutines on 2, say), sync.Mutex does not
// spin for a lock held by a running goroutine once its P has other work:
// the loser of a collision sleeps, and once a sleeper has waited a
// millisecond the mutex turns to starvation mode, handing itself from one
// sleeper to the next at each Unlock. Under a hot key that mode lasts, and
// every decision then waits for a goroutine to be woken and scheduled: 16
// goroutines on one hot key took three times as long per decision as one.
// shardLock retries for about the length of a decision first, then yields
// its P a few times, and only then sleeps, so that a lock held long (the
// janitor sweeping a large shard) costs its waiters no CPU; a woken
// sleeper competes for the lock again like any newcomer.
//
// The sleeping half is the futex mutex of Drepper's "Futexes Are Tricky"
// (mutex 2), with a one-token channel for the futex: state says unlocked,
// locked, or contended (locked, and a goroutine may sleep), and Unlock
// wakes a sleeper only from contended. A sleeper that loses the lock again
// sleeps again, so a sleeper may in principle wait behind newcomers for as
// long as they keep it busy; decisions are short, and sleepers are rare
// (a few in a thousand lock operations on a hot key).
type shardLock struct {
	state atomic.Int32
	// wake is the sleepers' channel, of capacity one, made by the first
	// goroutine that sleeps; nil until then. It is set before state
	// first turns contended.
	wake atomic.Pointer[chan struct{}]
}

// The values of shardLock.state.
const (
	unlocked int32 = iota
	locked
	contended
)

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
	if !l.state.CompareAndSwap(unlocked, locked) {
		l.lockSlow()
	}
}

// tryLock locks l if it is unlocked, and reports whether it did.
func (l *shardLock) tryLock() bool {
	return l.state.Load() == unlocked && l.state.CompareAndSwap(unlocked, locked)
}

// lockSlow spins, then yields, then sleeps until it holds l.
func (l *shardLock) lockSlow() {
	for range lockSpins {
		if l.tryLock() {
			return
		}
	}
	for range lockYields {
		runtime.Gosched()
		if l.tryLock() {
			return
		}
	}
	wake := l.sleepers()
	// Marking the lock contended before sleeping obliges its holder's
	// Unlock to wake a sleeper; a goroutine that takes it this way keeps
	// it marked, since others may still sleep.
	for l.state.Swap(contended) != unlocked {
		<-wake
	}
}

// sleepers returns l.wake, making it on first use.
func (l *shardLock) sleepers() chan struct{} {
	if c := l.wake.Load(); c != nil {
		return *c
	}
	c := make(chan struct{}, 1)
	if l.wake.CompareAndSwap(nil, &c) {
		return c
	}
	return *l.wake.Load()
}

// Unlock unlocks l, which the caller holds, and wakes a sleeper if one
// may be sleeping. A wake-up already pending (the channel full) is enough:
// its sleeper marks the lock contended again.
func (l *shardLock) Unlock() {
	if l.state.Swap(unlocked) == contended {
		select {
		case *l.wake.Load() <- struct{}{}:
		default:
		}
	}
}
