package memstore

import (
	"strings"
	"unsafe"

	"github.com/apigate/ratelimit/core"
)

// entry is one state and its identity: a client key under one policy (its
// name, and the algorithm, st.kind). The entries whose client keys share a
// hash (the same client under several policies, or a rare collision) are
// chained through next, behind one slot of the shard's table.
//
// key and name are the store's own copies: the caller's strings may point
// into memory it reuses (Fiber's zero-copy header values are rewritten by
// the next request) or into a larger buffer the table should not pin. The
// key is copied for each entry, on insert only (see setKey): into inline
// when it fits, which holds any IP address key, so that matching a key
// reads no memory beyond the entry, and an entry is one allocation; a
// longer key is a string of its own. The name is copied once for the many
// entries of one policy (see shard.intern). An entry is never copied by
// value, since its key may point into itself.
type entry struct {
	key  string
	name string
	next *entry
	st   state
	// inline holds key when it fits; it pads the entry to 128 bytes, one
	// size class of Go's allocator, two cache lines.
	inline [inlineKey]byte
}

// inlineKey is the longest key an entry holds inline: what is left of
// entrySize after the other fields, 24 bytes beside today's state.
// (unsafe.Sizeof here and in shard only sizes constants, the layout of
// memory; nothing is read or written through it.)
const inlineKey = max(8, entrySize-int(2*unsafe.Sizeof("")+unsafe.Sizeof(uintptr(0))+unsafe.Sizeof(state{})))

// entrySize is the size an entry is padded to with its inline key.
const entrySize = 128

// setKey makes e's key a copy of key, inline when it fits. It is called
// once, before e is inserted.
func (e *entry) setKey(key string) {
	if len(key) > len(e.inline) || key == "" {
		e.key = strings.Clone(key)
		return
	}
	n := copy(e.inline[:], key)
	// unsafe: the key inline, in the entry's own allocation, rather than a
	// string of its own: 1 against 2 allocs/op and 414 against 451
	// CPU-ns/op for a new key (go test -run '^$' -bench AllowNewKeys
	// ./core/memstore), 148 against 156 for a lookup among 100 000 keys
	// (-bench 'AllowKeyspace/keys=100000$'); medians of 6 alternating
	// runs, 2026-12-07.
	e.key = unsafe.String(&e.inline[0], n)
}

// is reports whether e is the state of key under the policy named name,
// of kind k.
func (e *entry) is(key, name string, k kind) bool {
	return e.st.kind == k && e.key == key && e.name == name
}

// shard is one lock and the states behind it, padded to a multiple of two
// cache lines so that neighbouring shards' locks never share one.
type shard struct {
	shardFields
	_ [128 - unsafe.Sizeof(shardFields{})%128]byte
}

type shardFields struct {
	mu shardLock
	t  table
	// n is the number of entries.
	n int
	// max is the most entries this shard holds; at least 1.
	max int
	// names are copies of the policy names of recent inserts, which
	// entries share (see intern); next is the one to replace.
	names [internNames]string
	next  int
}

// internNames is how many policy names a shard's entries share copies of.
// A store serves few policies; a name that is not among them is copied
// again, which only costs memory.
const internNames = 4

// intern returns a copy of name that the store owns, shared with the
// shard's other entries under that name. The caller holds sh.mu.
func (sh *shard) intern(name string) string {
	for _, n := range sh.names {
		if n == name && n != "" {
			return n
		}
	}
	if name == "" {
		return ""
	}
	own := strings.Clone(name)
	sh.names[sh.next] = own
	sh.next = (sh.next + 1) % internNames
	return own
}

// evictSample is how many entries a full shard looks at to choose a
// victim.
const evictSample = 8

// find returns the entry of key under the policy named name, of kind k,
// whose hash is h, or nil. The caller holds sh.mu.
func (sh *shard) find(h uint64, key, name string, k kind) *entry {
	for e := sh.t.get(h); e != nil; e = e.next {
		if e.is(key, name, k) {
			return e
		}
	}
	return nil
}

// take decides a request of cost under p, whose algorithm is k and whose
// capacity is capacity, for key, whose hash is h, at now (µs). It returns
// the time it decided at: now, or the key's last admission when that is
// later (see step), which is the time an admission is recorded at, and
// so the one that dates its give-back. It reports false, deciding
// nothing, when p's algorithm is unknown. The caller holds sh.mu.
func (sh *shard) take(h uint64, key string, p *core.Policy, k kind, capacity, cost, now int64) (outcome, int64, bool) {
	if e := sh.find(h, key, p.Name, k); e != nil {
		st := &e.st
		fresh := st.expires <= now
		if !fresh {
			now = max(now, st.last) // as step decides
		}
		if cost == 0 { // a peek writes nothing, not even a clear
			if fresh {
				return step(&state{kind: k}, true, p, 0, now), now, true
			}
			return step(st, false, p, 0, now), now, true
		}
		if fresh {
			// Expired state decides like none at all.
			st.clear()
			st.capacity = float32(capacity)
		}
		return step(st, fresh, p, cost, now), now, true
	}
	if k == unknownKind {
		return outcome{}, now, false
	}
	if cost == 0 { // a peek creates no state
		return step(&state{kind: k}, true, p, 0, now), now, true
	}
	e := &entry{st: state{kind: k, capacity: float32(capacity)}}
	o := step(&e.st, true, p, cost, now)
	if o.allowed { // always, since cost <= capacity; denials store nothing
		e.setKey(key)
		e.name = sh.intern(p.Name)
		sh.insert(h, e, now)
	}
	return o, now, true
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

// evict removes at least one entry, from a sample of evictSample entries
// at a random place in the table: every expired one or, when none has
// expired, the one whose loss forgets least (see cheaper). The caller
// holds sh.mu.
//
// Forgetting a state gives its client a whole quota early. Against a flood
// of new keys, each worth one request, this keeps the states that hold
// back the most: a client at its limit (a lockout) is forgotten only once
// the sample holds nothing worth less, and among states worth as much, the
// flood's newer ones go first.
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
		victim candidate
		worth  float64
		freed  bool
	)
	for _, c := range sample[:seen] {
		switch {
		case c.e.st.expires <= now:
			sh.remove(c.h, c.e)
			freed = true
		case victim.e == nil:
			victim, worth = c, c.e.st.worth(now)
		default:
			if w := c.e.st.worth(now); cheaper(&c.e.st, w, &victim.e.st, worth) {
				victim, worth = c, w
			}
		}
	}
	if !freed && victim.e != nil {
		sh.remove(victim.h, victim.e)
	}
}

// cheaper reports whether forgetting a, worth wa, costs less than
// forgetting b, worth wb: a is worth less; or as much, and was admitted
// later (a flood's newest state goes before the state it floods to push
// out); or that too, and expires sooner.
func cheaper(a *state, wa float64, b *state, wb float64) bool {
	if wa != wb {
		return wa < wb
	}
	if a.last != b.last {
		return a.last > b.last
	}
	return a.expires < b.expires
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
