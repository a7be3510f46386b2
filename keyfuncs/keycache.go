package keyfuncs

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
)

// keyCacheSlots is the number of client keys an ipResolver remembers: a
// direct-mapped table indexed by a hash of the address, so that a busy
// client, or a few, gets its key without formatting or allocating it.
const keyCacheSlots = 16

// keyCacheSample is how many misses, on average, make one cache entry.
const keyCacheSample = 8

// keyCache remembers the keys of client addresses seen lately, one per
// slot. An entry is immutable once stored. A miss formats the key, and
// one miss in keyCacheSample, at random, formats it into a new entry
// stored in its slot instead: a client that keeps coming is cached after
// a few requests, and clients that take turns cost hardly more than
// formatting their keys. The zero keyCache is empty and ready.
type keyCache struct {
	slots [keyCacheSlots]atomic.Pointer[keyEntry]
}

// keyEntry is the key of one address.
type keyEntry struct {
	addr netip.Addr
	key  string
}

// keyOf returns the key of a, a normalised client address: what format
// returns, from the cache when a was seen lately.
func (r *ipResolver) keyOf(a netip.Addr) string {
	slot := &r.keys.slots[addrHash(a)%keyCacheSlots]
	if e := slot.Load(); e != nil && e.addr == a {
		return e.key
	}
	if rand.Uint32()%keyCacheSample != 0 {
		return r.format(a)
	}
	e := &keyEntry{addr: a, key: r.format(a)}
	slot.Store(e)
	return e.key
}

// addrHash mixes the bits of a into a slot index.
func addrHash(a netip.Addr) uint64 {
	var x uint64
	if a.Is4() {
		b := a.As4()
		x = uint64(binary.LittleEndian.Uint32(b[:]))
	} else {
		b := a.As16()
		x = binary.LittleEndian.Uint64(b[:8])*0x9e3779b97f4a7c15 ^ binary.LittleEndian.Uint64(b[8:])
	}
	return (x * 0xff51afd7ed558ccd) >> 60
}
