package scores

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"
)

// Memory keeps scores in process, for one app server, in a bounded space:
// when full, a new key evicts the lowest of a sample of scores (so that a
// flood of distinct keys, each with one small signal, evicts its own
// kind, and keeps the clients that scored high). It is safe for
// concurrent use.
type Memory struct {
	hl     int64 // µs
	seed   maphash.Seed
	shards []memShard
	mask   uint64
}

type memShard struct {
	mu  sync.Mutex
	m   map[string]Entry
	max int
	_   [40]byte // apart from the next shard's lock
}

// Entry is a score as of its last signal.
type Entry struct {
	V  float64
	At int64 // µs since the Unix epoch
}

// Shards is the number of shards of a Memory.
const Shards = 16

// evictSample is how many scores a full shard looks at to evict one.
const evictSample = 8

// NewMemory returns a Memory of scores halving every halfLife, holding at
// most maxKeys keys (at least Shards).
func NewMemory(halfLife time.Duration, maxKeys int) (*Memory, error) {
	if err := Check(halfLife, 0); err != nil {
		return nil, err
	}
	if maxKeys < 1 {
		return nil, errors.New("scores: maxKeys below 1")
	}
	m := &Memory{hl: halfLife.Microseconds(), seed: maphash.MakeSeed(), shards: make([]memShard, Shards), mask: Shards - 1}
	for i := range m.shards {
		m.shards[i] = memShard{m: map[string]Entry{}, max: max(1, maxKeys/Shards)}
	}
	return m, nil
}

func (m *Memory) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, key)&m.mask]
}

// Add adds w to the score of key at now (the zero Time: time.Now) and
// returns the score after it.
func (m *Memory) Add(_ context.Context, key string, w float64, now time.Time) (float64, error) {
	if err := Check(time.Duration(m.hl)*time.Microsecond, w); err != nil {
		return 0, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	e := m.AddAt(key, w, now.UnixMicro())
	return e.V, nil
}

// AddAt adds w, checked (Check), to the score of key at us µs, and
// returns the score after it, with the time it was added at (later than
// us when the clock stepped back).
func (m *Memory) AddAt(key string, w float64, us int64) Entry {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if ok {
		if us < e.At {
			us = e.At // a clock stepping back: added at the last signal's time
		}
		e.V = Decay(e.V, us-e.At, m.hl)
	} else if len(sh.m) >= sh.max {
		sh.evict(us, m.hl)
	}
	e.V += w
	e.At = us
	sh.m[key] = e
	return e
}

// Get returns the score of key at now: 0 for a key with none.
func (m *Memory) Get(key string, now time.Time) float64 {
	sh := m.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok {
		return 0
	}
	v := Decay(e.V, now.UnixMicro()-e.At, m.hl)
	if v < Forgotten {
		return 0
	}
	return v
}

// Last returns key's score as of its last signal.
func (m *Memory) Last(key string) (Entry, bool) {
	sh := m.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	sh.mu.Unlock()
	return e, ok
}

// Put records e as key's score, as a store that decides elsewhere told
// it (a shared score).
func (m *Memory) Put(key string, e Entry) {
	sh := m.shard(key)
	sh.mu.Lock()
	if _, ok := sh.m[key]; !ok && len(sh.m) >= sh.max {
		sh.evict(e.At, m.hl)
	}
	sh.m[key] = e
	sh.mu.Unlock()
}

// Len returns the number of keys held.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// evict removes the forgotten scores of a sample, or else its lowest at
// now (µs). Go's map iteration starts at a random place, so the sample is
// a random one. The caller holds sh.mu.
func (sh *memShard) evict(now, hl int64) {
	var (
		victim string
		low    float64
		seen   int
		freed  bool
	)
	for k, e := range sh.m {
		v := Decay(e.V, now-e.At, hl)
		switch {
		case v < Forgotten:
			delete(sh.m, k)
			freed = true
		case seen == 0 || v < low:
			victim, low = k, v
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if !freed && seen > 0 {
		delete(sh.m, victim)
	}
}

// Range calls fn with every key's score at now that has not decayed below
// Forgotten, shard by shard (each locked while it is read).
func (m *Memory) Range(now time.Time, fn func(key string, v float64)) {
	us := now.UnixMicro()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if v := Decay(e.V, us-e.At, m.hl); v >= Forgotten {
				fn(k, v)
			}
		}
		sh.mu.Unlock()
	}
}
