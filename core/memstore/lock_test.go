package memstore

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestShardLockExcludes has many more goroutines than CPUs increment a
// plain counter under one shardLock: every increment counts (and -race
// sees the lock order them).
func TestShardLockExcludes(t *testing.T) {
	const goroutines, each = 32, 2000
	var (
		l  shardLock
		n  int
		wg sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				l.Lock()
				n++
				l.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, goroutines*each, n)
}

// TestShardLockWaitersBehindAHold starts waiters while the lock is held,
// so that they spin, yield and sleep (none can take it before it is
// released), then releases it: each waiter gets it once, every sleeper
// woken.
func TestShardLockWaitersBehindAHold(t *testing.T) {
	const waiters = 8
	var (
		l       shardLock
		got     []int
		started sync.WaitGroup
		done    sync.WaitGroup
	)
	l.Lock()
	for i := range waiters {
		started.Add(1)
		done.Go(func() {
			started.Done()
			l.Lock()
			got = append(got, i)
			l.Unlock()
		})
	}
	started.Wait()
	require.False(t, l.tryLock(), "the lock is held")
	require.Eventually(t, func() bool { return l.state.Load() == contended },
		testwait.D(10*time.Second), time.Millisecond, "a waiter goes to sleep")
	l.Unlock()
	done.Wait()
	require.Len(t, got, waiters)
	require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, got)
}

// TestShardLockLongHolds holds the lock across yields, so that waiters
// keep running out of spins and yields and sleep: every increment still
// counts, and no sleeper is left behind (the test would hang).
func TestShardLockLongHolds(t *testing.T) {
	const goroutines, each = 16, 300
	var (
		l  shardLock
		n  int
		wg sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				l.Lock()
				v := n
				runtime.Gosched()
				runtime.Gosched()
				n = v + 1
				l.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, goroutines*each, n)
	require.Equal(t, unlocked, l.state.Load())
}
