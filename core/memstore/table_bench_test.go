package memstore

import (
	"fmt"
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// BenchmarkIndex compares a shard's table with the plain Go maps it
// replaced, on the work of one decision: find a client key's state under a
// token-bucket policy behind a lock, and decide with step. Every variant
// holds n keys, created before the timer starts, and decides for them in
// turn at one explicit time, all admitted:
//
//   - table: the Store's index, 64 shards (its default on up to 16 CPUs),
//     each a mutex and a table keyed by the one hash that picked the shard;
//   - map: one map[string]*state behind one sync.Mutex;
//   - shardedmap: 64 such maps, picked by the same hash, which the map then
//     computes again.
//
// The maps are given the easier job: keyed by the client key alone, they
// hold one policy, where the table also matches the policy's name and
// algorithm. It reports ns/op and allocs/op, the live heap per key once the
// keys are in (heap-B/key), and what is left of it once every key has
// expired and been removed, as the janitor does (left-B/key, per key once
// held): the table shrinks, a Go map never does.
func BenchmarkIndex(b *testing.B) {
	p := core.Policy{Name: "bench", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro()
	for _, n := range []int{1, 1_000, 100_000, 1_000_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
		}
		for _, name := range []string{"table", "map", "shardedmap"} {
			b.Run(fmt.Sprintf("%s/keys=%d", name, n), func(b *testing.B) {
				before := indexHeap()
				ix := newIndex(name)
				for _, k := range keys {
					if !ix.take(k, &p, now).allowed {
						b.Fatal("denied while filling")
					}
				}
				held := indexHeap() - before
				b.ReportAllocs()
				b.ResetTimer()
				i := 0
				for b.Loop() {
					if !ix.take(keys[i], &p, now).allowed {
						b.Fatal("denied")
					}
					if i++; i == n {
						i = 0
					}
				}
				b.StopTimer()
				ix.removeExpired(now + 2*time.Second.Microseconds())
				left := indexHeap() - before
				runtime.KeepAlive(ix)
				b.ReportMetric(float64(held)/float64(n), "heap-B/key")
				b.ReportMetric(float64(left)/float64(n), "left-B/key")
			})
		}
	}
}

// indexHeap returns the bytes of live heap after a collection.
func indexHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// benchIndex is one way to find a key's state.
type benchIndex interface {
	// take decides a request of cost 1 under the token-bucket policy p for
	// key at now (µs).
	take(key string, p *core.Policy, now int64) outcome
	// removeExpired removes every state expired at now.
	removeExpired(now int64)
}

const indexShards = 64

func newIndex(name string) benchIndex {
	switch name {
	case "table":
		return &tableIndex{shards: make([]shard, indexShards), seed: maphash.MakeSeed()}
	case "map":
		return &mapIndex{m: map[string]*state{}}
	default:
		s := &shardedMapIndex{shards: make([]mapIndex, indexShards), seed: maphash.MakeSeed()}
		for i := range s.shards {
			s.shards[i].m = map[string]*state{}
		}
		return s
	}
}

// tableIndex is what Store.Take does between its checks and its Decision.
// Its shards have no key limit (max 0), so nothing is evicted.
type tableIndex struct {
	shards []shard
	seed   maphash.Seed
}

func (x *tableIndex) take(key string, p *core.Policy, now int64) outcome {
	h := maphash.String(x.seed, key)
	sh := &x.shards[h&(indexShards-1)]
	sh.mu.Lock()
	o, _, _ := sh.take(h, key, p, tokenBucketKind, p.Limit, 1, now)
	sh.mu.Unlock()
	return o
}

func (x *tableIndex) removeExpired(now int64) {
	for i := range x.shards {
		sh := &x.shards[i]
		sh.mu.Lock()
		sh.sweep(now)
		sh.mu.Unlock()
	}
}

// mapIndex is a plain map behind a mutex, deciding as shard.take does.
type mapIndex struct {
	mu sync.Mutex
	m  map[string]*state
}

func (x *mapIndex) take(key string, p *core.Policy, now int64) outcome {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.m[key]
	if st == nil {
		st = &state{kind: tokenBucketKind, capacity: float32(p.Limit)}
		o := step(st, true, p, 1, now)
		x.m[strings.Clone(key)] = st
		return o
	}
	fresh := st.expires <= now
	if fresh {
		st.clear()
		st.capacity = float32(p.Limit)
	}
	return step(st, fresh, p, 1, now)
}

func (x *mapIndex) removeExpired(now int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, st := range x.m {
		if st.expires <= now {
			delete(x.m, k)
		}
	}
}

// shardedMapIndex spreads keys over mapIndexes by their hash.
type shardedMapIndex struct {
	shards []mapIndex
	seed   maphash.Seed
}

func (x *shardedMapIndex) take(key string, p *core.Policy, now int64) outcome {
	return x.shards[maphash.String(x.seed, key)&(indexShards-1)].take(key, p, now)
}

func (x *shardedMapIndex) removeExpired(now int64) {
	for i := range x.shards {
		x.shards[i].removeExpired(now)
	}
}
