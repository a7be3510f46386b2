package memstore

import (
	"hash/maphash"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// hotGoroutines is how many goroutines the contention benchmarks decide
// from, whatever GOMAXPROCS: the 16 of the hot-key case.
const hotGoroutines = 16

// setHotParallelism makes b.RunParallel start at least hotGoroutines
// goroutines.
func setHotParallelism(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((hotGoroutines + procs - 1) / procs)
}

// BenchmarkHotKeyLock compares the shard's lock with the sync.Mutex it
// replaced, in the same run: hotGoroutines goroutines decide for one
// token-bucket key as Store.Take does (read the clock, hash the key, lock
// the shard, shard.take, unlock). Only the lock differs.
func BenchmarkHotKeyLock(b *testing.B) {
	p := core.Policy{Name: "bench", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	const key = "203.0.113.7"
	for _, name := range []string{"sync.Mutex", "shardLock"} {
		b.Run(name, func(b *testing.B) {
			var (
				sh    shard
				mu    sync.Mutex
				seed  = maphash.MakeSeed()
				clock = newClock()
			)
			lock, unlock := sh.mu.Lock, sh.mu.Unlock
			if name == "sync.Mutex" {
				lock, unlock = mu.Lock, mu.Unlock
			}
			setHotParallelism(b)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := clock.now()
					h := maphash.String(seed, key)
					lock()
					o, _, _ := sh.take(h, key, &p, tokenBucketKind, p.Limit, 1, now)
					unlock()
					if !o.allowed {
						b.Error("denied")
						return
					}
				}
			})
		})
	}
}
