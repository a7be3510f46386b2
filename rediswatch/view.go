package rediswatch

import (
	"container/heap"
	"hash/maphash"
	"maps"
	"net/netip"
	"strconv"
	"time"

	"github.com/gaissmai/bart"

	"github.com/apigate/ratelimit/access"
)

// A view is the snapshot Match reads: an immutable set of bans that
// matches as access.List does (a key first, then the longest live range,
// falling back to the next shorter live one). Unlike a List, a new view is
// made from the last one in time proportional to the change, not to the
// bans held: its ranges are a bart table changed by path copying
// (InsertPersist, DeletePersist: a few nodes copied), its keys 256 maps
// of which a change copies the one it touches (a 256th of the keys). Both
// share every unchanged part, and every *ban, with the view they came
// from; so a ban, once in a view, is never changed.
//
// Design note: access.List would cost a full rebuild per change (75 ms at
// 100,000 bans), which is what made Ban slow; the views keep its Match
// semantics, checked against it by TestViewMatchesList.
type view struct {
	ranges  *bart.Table[*ban]
	keys    *keyTable
	nranges int
	nkeys   int
}

// ban is one ban of a view.
type ban struct {
	entry access.Entry // Expires by this server's clock
	ms    int64        // Expires by Redis's clock, Unix ms; 0 if permanent
}

// value returns the ban as Redis stores it.
func (b *ban) value() string {
	return "v1|" + strconv.FormatInt(b.ms, 10) + "|" + b.entry.Reason
}

// keyShards is how many maps hold the keys; a power of two.
const keyShards = 256

type keyTable [keyShards]map[string]*ban

var shardSeed = maphash.MakeSeed()

func shardOf(key string) int { return int(maphash.String(shardSeed, key) & (keyShards - 1)) }

var emptyView = &view{ranges: new(bart.Table[*ban]), keys: new(keyTable)}

// match is Match. It does not allocate.
func (v *view) match(addr netip.Addr, key string, now time.Time) (access.Entry, bool) {
	if key != "" && v.nkeys > 0 {
		if b, ok := v.keys[shardOf(key)][key]; ok && liveAt(b.entry, now) {
			return b.entry, true
		}
	}
	if !addr.IsValid() || v.nranges == 0 {
		return access.Entry{}, false
	}
	addr = addr.Unmap().WithZone("")
	b, ok := v.ranges.Lookup(addr)
	for ok {
		if liveAt(b.entry, now) {
			return b.entry, true
		}
		bits := b.entry.Prefix.Bits()
		if bits == 0 {
			break
		}
		// The longest range shorter than the expired one that holds addr.
		b, ok = v.ranges.LookupPrefix(netip.PrefixFrom(addr, bits-1))
	}
	return access.Entry{}, false
}

// get returns the ban of target (an entry's Prefix or Key), or nil.
func (v *view) get(target access.Entry) *ban {
	if target.Key != "" {
		return v.keys[shardOf(target.Key)][target.Key]
	}
	b, _ := v.ranges.Get(target.Prefix)
	return b
}

func (v *view) len() int { return v.nranges + v.nkeys }

// each calls f for every ban, ranges first, until f returns false.
func (v *view) each(f func(*ban) bool) {
	for _, b := range v.ranges.All() {
		if !f(b) {
			return
		}
	}
	for _, m := range v.keys {
		for _, b := range m {
			if !f(b) {
				return
			}
		}
	}
}

// A builder makes a view from another by a series of changes, copying
// what they touch once; build returns it. A builder is used by one
// goroutine, and not after build.
type builder struct {
	v       view
	inPlace bool // v.ranges is the builder's own: change it in place
	keysOwn bool // v.keys is the builder's own copy
	own     [keyShards]bool
}

// from returns a builder of changes to base, which it leaves as it is.
func from(base *view) *builder { return &builder{v: *base} }

// fresh returns a builder of a view of its own, for n bans or so.
func fresh() *builder {
	bl := &builder{v: view{ranges: new(bart.Table[*ban]), keys: new(keyTable)}, inPlace: true, keysOwn: true}
	for i := range bl.own {
		bl.own[i] = true
	}
	return bl
}

// bulk prepares for n more changes: past a few hundred (a 200th of the
// ranges), one copy of the whole range table costs less than a path copy
// per change (about 2.5 ms for 50,000 ranges, against up to 10 µs a
// change that adds nodes).
func (bl *builder) bulk(n int) {
	if !bl.inPlace && n > 64 && n*200 > bl.v.nranges {
		bl.v.ranges = bl.v.ranges.Clone()
		bl.inPlace = true
	}
}

// shard returns the builder's own copy of key's map.
func (bl *builder) shard(key string) map[string]*ban {
	if !bl.keysOwn {
		k := *bl.v.keys
		bl.v.keys = &k
		bl.keysOwn = true
	}
	s := shardOf(key)
	if !bl.own[s] {
		old := bl.v.keys[s]
		m := make(map[string]*ban, len(old)+1)
		maps.Copy(m, old)
		bl.v.keys[s] = m
		bl.own[s] = true
	} else if bl.v.keys[s] == nil {
		bl.v.keys[s] = make(map[string]*ban)
	}
	return bl.v.keys[s]
}

// put adds b, replacing the ban of its target if any.
func (bl *builder) put(b *ban) {
	if b.entry.Key != "" {
		m := bl.shard(b.entry.Key)
		if _, had := m[b.entry.Key]; !had {
			bl.v.nkeys++
		}
		m[b.entry.Key] = b
		return
	}
	p := b.entry.Prefix
	if _, had := bl.v.ranges.Get(p); !had {
		bl.v.nranges++
	}
	if bl.inPlace {
		bl.v.ranges.Insert(p, b)
	} else {
		bl.v.ranges = bl.v.ranges.InsertPersist(p, b)
	}
}

// del removes the ban of target and returns it, or nil if there was none.
func (bl *builder) del(target access.Entry) *ban {
	if target.Key != "" {
		old, ok := bl.v.keys[shardOf(target.Key)][target.Key]
		if !ok {
			return nil
		}
		delete(bl.shard(target.Key), target.Key)
		bl.v.nkeys--
		return old
	}
	old, ok := bl.v.ranges.Get(target.Prefix)
	if !ok {
		return nil
	}
	if bl.inPlace {
		bl.v.ranges.Delete(target.Prefix)
	} else {
		bl.v.ranges = bl.v.ranges.DeletePersist(target.Prefix)
	}
	bl.v.nranges--
	return old
}

// build returns the view.
func (bl *builder) build() *view {
	v := bl.v
	return &v
}

// expiry is a min-heap of bans by their Expires, to drop them from the
// view once they end. It is lazy: a ban replaced or lifted stays in it
// until its time, and is then found no longer in the view.
type expiry []*ban

func (h expiry) Len() int           { return len(h) }
func (h expiry) Less(i, j int) bool { return h[i].entry.Expires.Before(h[j].entry.Expires) }
func (h expiry) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiry) Push(x any)        { *h = append(*h, x.(*ban)) }
func (h *expiry) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return b
}

// add puts b in the heap if it expires.
func (h *expiry) add(b *ban) {
	if !b.entry.Expires.IsZero() {
		heap.Push(h, b)
	}
}

// init makes a heap of the bans h holds.
func (h *expiry) init() { heap.Init(h) }

// reset makes the heap hold the expiring bans of v.
func (h *expiry) reset(v *view) {
	*h = (*h)[:0]
	v.each(func(b *ban) bool {
		if !b.entry.Expires.IsZero() {
			*h = append(*h, b)
		}
		return true
	})
	heap.Init(h)
}

// prune drops from v the bans expired at now and returns the new view, or
// nil when none had.
func (h *expiry) prune(v *view, now time.Time) *view {
	var bl *builder
	for len(*h) > 0 && !liveAt((*h)[0].entry, now) {
		b := heap.Pop(h).(*ban)
		if v.get(b.entry) != b {
			continue // replaced or lifted since
		}
		if bl == nil {
			bl = from(v)
		}
		bl.del(b.entry)
	}
	// Bound the stale bans it keeps.
	if len(*h) > 2*v.len()+1024 {
		if bl != nil {
			h.reset(bl.build())
		} else {
			h.reset(v)
		}
	}
	if bl == nil {
		return nil
	}
	return bl.build()
}
