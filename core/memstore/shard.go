package memstore

import (
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/apigate/ratelimit/core"
)

// entryKey identifies one state: a client key under one policy. A struct of
// strings, rather than their concatenation, so that looking a key up
// allocates nothing.
type entryKey struct {
	name string
	alg  core.Algorithm
	key  string
}

// shard is one lock and the states behind it, padded to a multiple of two
// cache lines so that neighbouring shards' locks never share one.
type shard struct {
	shardFields
	_ [128 - unsafe.Sizeof(shardFields{})%128]byte
}

type shardFields struct {
	mu sync.Mutex
	m  map[entryKey]*state
	// max is the most keys this shard holds; 0 means unbounded.
	max int
	// peak is the most keys held since the map was last rebuilt. Go maps
	// never give back their memory, so sweep rebuilds a map that has
	// shrunk well below its peak.
	peak int
}

const (
	// evictSample is how many keys a full shard looks at to choose a
	// victim.
	evictSample = 8
	// rebuildMin is the smallest peak worth rebuilding a map for.
	rebuildMin = 1024
	// logShrinkMin is the smallest sliding-log capacity worth shrinking.
	logShrinkMin = 64
)

// take decides a request of cost under p, for k, at now (µs). It reports
// false, deciding nothing, when k has no state and p's algorithm is unknown.
// The caller holds sh.mu.
func (sh *shard) take(k *entryKey, p *core.Policy, cost, now int64) (outcome, bool) {
	if st, ok := sh.m[*k]; ok {
		fresh := st.expires <= now
		if fresh {
			// Expired state decides like none at all; keep the log's
			// array, shrinkLog bounds it.
			*st = state{log: st.log[:0]}
		}
		o := step(st, fresh, p, cost, now)
		shrinkLog(st)
		return o, true
	}
	if !p.Algorithm.Known() {
		return outcome{}, false
	}
	var st state
	o := step(&st, true, p, cost, now)
	if o.allowed { // always, since cost <= capacity; denials store nothing
		sh.insert(*k, &st, now)
	}
	return o, true
}

// insert stores a copy of st under k, evicting first when the shard is
// full. The caller holds sh.mu.
func (sh *shard) insert(k entryKey, st *state, now int64) {
	if sh.max > 0 && len(sh.m) >= sh.max {
		sh.evict(now)
	}
	// The client key often points into a larger string (a header, a
	// request line); copy it so the map does not pin that memory.
	k.key = strings.Clone(k.key)
	v := new(state)
	*v = *st
	sh.m[k] = v
	sh.peak = max(sh.peak, len(sh.m))
}

// evict removes at least one key: the expired ones among a sample of
// evictSample keys or, when none has expired, the sampled key that would
// expire soonest. Map iteration starts at a random place, which makes the
// sample random enough. The caller holds sh.mu.
func (sh *shard) evict(now int64) {
	var (
		victim  entryKey
		soonest int64 = math.MaxInt64
		seen    int
		freed   bool
	)
	for k, st := range sh.m {
		if st.expires <= now {
			delete(sh.m, k)
			freed = true
		} else if st.expires < soonest {
			victim, soonest = k, st.expires
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if !freed && seen > 0 {
		delete(sh.m, victim)
	}
}

// sweep removes every state expired at now (µs), shrinks oversized logs,
// and rebuilds the map when it holds far fewer keys than it once did. The
// caller holds sh.mu.
func (sh *shard) sweep(now int64) {
	for k, st := range sh.m {
		if st.expires <= now {
			delete(sh.m, k)
		} else {
			shrinkLog(st)
		}
	}
	if n := len(sh.m); sh.peak >= rebuildMin && n <= sh.peak/4 {
		m := make(map[entryKey]*state, n)
		for k, st := range sh.m {
			m[k] = st
		}
		sh.m, sh.peak = m, n
	}
}

// shrinkLog reallocates a sliding log whose array is at least four times
// larger than its entries, so that a key that once logged 100 000 units
// and now logs 3 does not keep the large array. The new capacity is twice
// the length, so shrinking and regrowing cost amortized O(1) per entry.
func shrinkLog(st *state) {
	if c := cap(st.log); c >= logShrinkMin && len(st.log) <= c/4 {
		st.log = append(make([]logEntry, 0, max(2*len(st.log), 8)), st.log...)
	}
}
