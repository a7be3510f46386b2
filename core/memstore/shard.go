package memstore

import (
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/apigate/ratelimit/core"
)

// entry is one state and its identity: a client key under one policy (its
// name and algorithm). The entries whose client keys share a hash (the same
// client under several policies, or a rare collision) are chained through
// next, behind one slot of the shard's table.
type entry struct {
	key  string
	name string
	alg  core.Algorithm
	next *entry
	st   state
}

// is reports whether e is the state of key under p.
func (e *entry) is(key string, p *core.Policy) bool {
	return e.key == key && same(e.name, p.Name) && same(string(e.alg), string(p.Algorithm))
}

// same is a == b, without calling memequal when a and b share their bytes,
// as a policy's name and algorithm usually do with the ones its entries
// were made with.
func same(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// shard is one lock and the states behind it, padded to a multiple of two
// cache lines so that neighbouring shards' locks never share one.
type shard struct {
	shardFields
	_ [128 - unsafe.Sizeof(shardFields{})%128]byte
}

type shardFields struct {
	mu sync.Mutex
	t  table
	// n is the number of entries.
	n int
	// max is the most entries this shard holds; 0 means unbounded.
	max int
}

// evictSample is how many entries a full shard looks at to choose a
// victim.
const evictSample = 8

// find returns the entry of key under p, whose hash is h, or nil. The
// caller holds sh.mu.
func (sh *shard) find(h uint64, key string, p *core.Policy) *entry {
	for e := sh.t.get(h); e != nil; e = e.next {
		if e.is(key, p) {
			return e
		}
	}
	return nil
}

// take decides a request of cost under p, for key, whose hash is h, at now
// (µs). It reports false, deciding nothing, when key has no state under p
// and p's algorithm is unknown. The caller holds sh.mu.
func (sh *shard) take(h uint64, key string, p *core.Policy, cost, now int64) (outcome, bool) {
	if e := sh.find(h, key, p); e != nil {
		st := &e.st
		fresh := st.expires <= now
		if fresh {
			// Expired state decides like none at all.
			st.clear()
		}
		return step(st, fresh, p, cost, now), true
	}
	k := kindOf(p.Algorithm)
	if k == unknownKind {
		return outcome{}, false
	}
	e := &entry{name: p.Name, alg: p.Algorithm, st: state{kind: k}}
	o := step(&e.st, true, p, cost, now)
	if o.allowed { // always, since cost <= capacity; denials store nothing
		// The client key often points into a larger string (a header,
		// a request line); copy it so the table does not pin that memory.
		e.key = strings.Clone(key)
		sh.insert(h, e, now)
	}
	return o, true
}

// insert adds e under h, evicting first when the shard is full. The
// caller holds sh.mu.
func (sh *shard) insert(h uint64, e *entry, now int64) {
	if sh.max > 0 && sh.n >= sh.max {
		sh.evict(now)
	}
	sh.t.push(h, e)
	sh.n++
}

// remove removes e, which is under h. The caller holds sh.mu.
func (sh *shard) remove(h uint64, e *entry) {
	sh.t.unlink(h, e)
	sh.n--
}

// evict removes at least one entry: the expired ones among a sample of
// evictSample entries from a random place in the table or, when none has
// expired, the sampled entry that would expire soonest. The caller holds
// sh.mu.
func (sh *shard) evict(now int64) {
	type candidate struct {
		h uint64
		e *entry
	}
	var (
		sample [evictSample]candidate
		seen   int
	)
	sh.t.sample(evictSample, func(h uint64, e *entry) {
		for ; e != nil && seen < evictSample; e = e.next {
			sample[seen] = candidate{h, e}
			seen++
		}
	})
	var (
		victim  candidate
		soonest int64 = math.MaxInt64
		freed   bool
	)
	for _, c := range sample[:seen] {
		if c.e.st.expires <= now {
			sh.remove(c.h, c.e)
			freed = true
		} else if c.e.st.expires < soonest {
			victim, soonest = c, c.e.st.expires
		}
	}
	if !freed && victim.e != nil {
		sh.remove(victim.h, victim.e)
	}
}

// sweep removes every state expired at now (µs), shrinks oversized logs,
// and shrinks the table when it holds far fewer keys than it once did. The
// caller holds sh.mu.
func (sh *shard) sweep(now int64) {
	t := &sh.t
	for i := 0; i < len(t.slots); {
		s := t.slots[i]
		if s.e == nil {
			i++
			continue
		}
		for e := s.e; e != nil; {
			next := e.next
			if e.st.expires <= now {
				sh.remove(s.h, e)
			} else if e.st.log != nil {
				e.st.log.shrink()
			}
			e = next
		}
		// Removing a chain's last entry frees its slot, and may shift
		// into it a chain not yet looked at: look at it again. (A chain
		// shifted from the start of the array to its end is looked at
		// twice, which is harmless.)
		if t.slots[i].e == nil || t.slots[i].h == s.h {
			i++
		}
	}
	t.shrink()
}
