package memstore

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
// so that they spin, yield and may sleep in sync.Mutex.Lock (none can take
// it before it is released), then releases it: each waiter gets it once.
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
	require.False(t, l.mu.TryLock(), "the lock is held")
	l.Unlock()
	done.Wait()
	require.Len(t, got, waiters)
	require.ElementsMatch(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, got)
}
