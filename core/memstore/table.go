package memstore

import (
	"math/bits"
	"math/rand/v2"
)

// table is a shard's index: an open-addressing hash table, with linear
// probing, from the hash of a client key to the chain of that key's
// entries. It is keyed by the hash the Store already computed to choose the
// shard, so that a decision hashes the client key once; a slot holds the
// hash and the chain's head, 16 bytes, so a lookup usually reads one cache
// line before the entry itself. Deletion shifts back the entries that
// probed past the freed slot, so there are no tombstones, and the table
// grows at 3/4 full and shrinks (in sweep) at 1/8 full.
//
// A slot's home is the top bits of its hash; the Store chooses the shard by
// the bottom bits, so the two do not correlate.
type table struct {
	slots []slot // a power of two long, or empty
	used  int    // slots in use
	shift uint   // 64 - log2(len(slots))
}

type slot struct {
	h uint64
	e *entry // nil when the slot is free
}

const (
	// minSlots is the size of a table's first array.
	minSlots = 8
	// shrinkMin is the smallest array worth shrinking.
	shrinkMin = 1024
)

// home is the slot where a chain of hash h belongs.
func (t *table) home(h uint64) uint64 { return h >> t.shift }

// mask is len(t.slots)-1.
func (t *table) mask() uint64 { return uint64(len(t.slots) - 1) }

// find returns the index of h's slot, or -1.
func (t *table) find(h uint64) int {
	if len(t.slots) == 0 {
		return -1
	}
	mask := t.mask()
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return -1
		}
		if s.h == h {
			return int(i)
		}
	}
}

// get returns the chain of h, or nil.
func (t *table) get(h uint64) *entry {
	if len(t.slots) == 0 {
		return nil
	}
	mask := t.mask()
	for i := t.home(h); ; i = (i + 1) & mask {
		// A free slot ends the probe, and holds a nil chain.
		if s := &t.slots[i]; s.h == h || s.e == nil {
			return s.e
		}
	}
}

// push puts e at the head of h's chain, which it links behind e.
func (t *table) push(h uint64, e *entry) {
	if i := t.find(h); i >= 0 {
		e.next = t.slots[i].e
		t.slots[i].e = e
		return
	}
	if 4*(t.used+1) > 3*len(t.slots) {
		t.resize(max(minSlots, 2*len(t.slots)))
	}
	e.next = nil
	t.place(h, e)
	t.used++
}

// place stores a chain in the first free slot from h's home. The table
// has one.
func (t *table) place(h uint64, e *entry) {
	mask := t.mask()
	i := t.home(h)
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot{h, e}
}

// unlink removes e from h's chain, freeing the slot when the chain
// empties. e must be in the table under h.
func (t *table) unlink(h uint64, e *entry) {
	i := t.find(h)
	s := &t.slots[i]
	if s.e == e {
		s.e = e.next
		if s.e == nil {
			t.free(uint64(i))
		}
	} else {
		prev := s.e
		for prev.next != e {
			prev = prev.next
		}
		prev.next = e.next
	}
	e.next = nil
}

// free empties slot i and shifts back into it, one after the other, the
// chains after it that probed past it, so that every chain stays reachable
// from its home without tombstones.
func (t *table) free(i uint64) {
	mask := t.mask()
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.e == nil {
			break
		}
		// s may move back to i unless its home is in (i, j], cyclically.
		if (j-t.home(s.h))&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot{}
	t.used--
}

// resize moves the chains to a new array of n slots, a power of two.
func (t *table) resize(n int) {
	old := t.slots
	t.slots = make([]slot, n)
	t.shift = uint(64 - bits.TrailingZeros(uint(n)))
	for _, s := range old {
		if s.e != nil {
			t.place(s.h, s.e)
		}
	}
}

// shrink moves the chains to a smaller array once at most 1/8 of a large
// one is used, so that a shard that once held many keys gives the memory
// back. The new array is half used at most, so growing again is far off.
func (t *table) shrink() {
	if n := len(t.slots); n >= shrinkMin && t.used <= n/8 {
		t.resize(max(minSlots, 1<<bits.Len(uint(2*t.used))))
	}
}

// sample calls f on the chains of up to n slots in use, starting at a
// random slot. f must not change the table.
func (t *table) sample(n int, f func(h uint64, e *entry)) {
	if t.used == 0 {
		return
	}
	mask := t.mask()
	i := rand.Uint64() & mask
	for seen := 0; seen < n && seen < t.used; i = (i + 1) & mask {
		if s := t.slots[i]; s.e != nil {
			f(s.h, s.e)
			seen++
		}
	}
}
