package access

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"
)

// table finds the longest range of a List that holds an address. The
// ranges of each family are flattened into disjoint spans that cover the
// whole address space in order, each naming the longest range over it
// (or none); Match finds an address's span by a search over their
// starts. Ranges nest or are disjoint, so this is exact, and it holds at
// most two spans per range, and one more.
//
// Design note: it replaced github.com/gaissmai/bart so that package
// access needs no dependency. With BenchmarkMatch's 100,000 ranges, in
// thread CPU time per Match (median of 30 runs, alternating, on a busy
// 2-core machine), bart against this table: a random stream 84.5 ns
// against 47.7; one IPv4 address 16.9 against 9.1 (hit) and 16.2
// against 6.9 (miss); one IPv6 address 27.3 against 24.6 (hit) and 7.6
// against 11.8 (miss, past every range); 0 allocations each. A List
// holds 15.3 MiB against 12.1 (BenchmarkListHeap; the table about 6 MiB
// against 3), and NewList makes 282 allocations instead of 141,636. One
// hash map per prefix length was not tried: a miss would cost one lookup
// per length present (25 for the benchmark's IPv4 ranges, 49 for IPv6).
type table struct {
	v4 spans[uint32]
	v6 spans[uint128]
}

// spans is one family's spans: span i runs from starts[i] up to
// starts[i+1] (or the end of the space) and is covered by the range at
// index ranges[i] of List.ranges, -1 for none. starts[0] is 0, so every
// address has a span.
//
// buckets narrows the search: the addresses from starts[1] to the last
// start share their first skip bits, and the next bits (width of them)
// number a bucket b, whose addresses lie in the spans buckets[b] to
// buckets[b+1]. There are about as many buckets as spans, so that a
// search looks at one or two spans and reads a few cache lines; ranges
// crowded into a few buckets are found by binary search within them.
type spans[K comparable] struct {
	starts  []K
	ranges  []int32
	buckets []int32
	skip    uint8
	width   uint8
}

// uint128 is an IPv6 address as a number, for ordering.
type uint128 struct{ hi, lo uint64 }

// bucket4 returns the bits of a after skip, width of them.
func bucket4(a uint32, skip, width uint8) uint32 { return a << skip >> (32 - width) }

// bucket6 is bucket4 for IPv6.
func bucket6(a uint128, skip, width uint8) uint32 {
	var top uint64 // the 64 bits after skip
	if skip < 64 {
		top = a.hi<<skip | a.lo>>(64-skip)
	} else {
		top = a.lo << (skip - 64)
	}
	return uint32(top >> (64 - width))
}

// lookup4 returns the index of the longest range holding a, or -1.
func (t *table) lookup4(a uint32) int32 {
	s := &t.v4
	n := len(s.starts)
	switch {
	case n == 0:
		return -1
	case n == 1 || a < s.starts[1]:
		return s.ranges[0]
	case a >= s.starts[n-1]:
		return s.ranges[n-1]
	}
	b := bucket4(a, s.skip, s.width)
	// The last start at or before a, among those of the bucket.
	base, m := int(s.buckets[b]), int(s.buckets[b+1]-s.buckets[b])+1
	for m > 1 {
		half := m >> 1
		if s.starts[base+half] <= a {
			base += half
		}
		m -= half
	}
	return s.ranges[base]
}

// lookup6 is lookup4 for IPv6.
func (t *table) lookup6(a uint128) int32 {
	s := &t.v6
	n := len(s.starts)
	switch {
	case n == 0:
		return -1
	case n == 1 || less6(a, s.starts[1]):
		return s.ranges[0]
	case !less6(a, s.starts[n-1]):
		return s.ranges[n-1]
	}
	b := bucket6(a, s.skip, s.width)
	base, m := int(s.buckets[b]), int(s.buckets[b+1]-s.buckets[b])+1
	for m > 1 {
		half := m >> 1
		if !less6(a, s.starts[base+half]) {
			base += half
		}
		m -= half
	}
	return s.ranges[base]
}

func less6(a, b uint128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// lookup returns the index of the longest range holding addr (unmapped),
// or -1.
func (t *table) lookup(addr netip.Addr) int32 {
	if addr.Is4() {
		b := addr.As4()
		return t.lookup4(binary.BigEndian.Uint32(b[:]))
	}
	return t.lookup6(u128(addr))
}

func u128(addr netip.Addr) uint128 {
	b := addr.As16()
	return uint128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// extent is a range as first and last address, and its index.
type extent[K any] struct {
	first, last K
	index       int32
}

// family is what building the spans of an address family needs of its
// numbers: fam4 for IPv4, fam6 for IPv6.
type family[K any] interface {
	bits() int // of an address
	compare(a, b K) int
	next(K) (K, bool)  // K+1, false past the last address
	common(a, b K) int // the leading bits a and b share
	bucket(a K, skip, width uint8) uint32
}

// maxWidth bounds the bits that number a bucket: 4 MiB of buckets.
const maxWidth = 20

type (
	fam4 struct{}
	fam6 struct{}
)

func (fam4) bits() int                                 { return 32 }
func (fam4) compare(a, b uint32) int                   { return cmp.Compare(a, b) }
func (fam4) next(k uint32) (uint32, bool)              { return k + 1, k != ^uint32(0) }
func (fam4) common(a, b uint32) int                    { return bits.LeadingZeros32(a ^ b) }
func (fam4) bucket(a uint32, skip, width uint8) uint32 { return bucket4(a, skip, width) }

func (fam6) bits() int { return 128 }

func (fam6) compare(a, b uint128) int {
	if c := cmp.Compare(a.hi, b.hi); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

func (fam6) next(k uint128) (uint128, bool) {
	if k.lo != ^uint64(0) {
		return uint128{k.hi, k.lo + 1}, true
	}
	return uint128{k.hi + 1, 0}, k.hi != ^uint64(0)
}

func (fam6) common(a, b uint128) int {
	if a.hi != b.hi {
		return bits.LeadingZeros64(a.hi ^ b.hi)
	}
	return 64 + bits.LeadingZeros64(a.lo^b.lo)
}

func (fam6) bucket(a uint128, skip, width uint8) uint32 { return bucket6(a, skip, width) }

// newTable builds the table of ranges (masked, IPv4 unmapped) and sets
// each one's parent: the index of the longest other range holding it, or
// -1.
func newTable(ranges []rangeNode) table {
	n4 := 0
	for i := range ranges {
		if ranges[i].entry.Prefix.Addr().Is4() {
			n4++
		}
	}
	v4 := make([]extent[uint32], 0, n4)
	v6 := make([]extent[uint128], 0, len(ranges)-n4)
	for i := range ranges {
		p := ranges[i].entry.Prefix
		if p.Addr().Is4() {
			b := p.Addr().As4()
			first := binary.BigEndian.Uint32(b[:])
			v4 = append(v4, extent[uint32]{first, first | ^uint32(0)>>p.Bits(), int32(i)})
			continue
		}
		first, host := u128(p.Addr()), uint128{^uint64(0), ^uint64(0)}
		if bits := p.Bits(); bits >= 64 {
			host = uint128{0, ^uint64(0) >> (bits - 64)}
		} else {
			host.hi >>= bits
		}
		v6 = append(v6, extent[uint128]{first, uint128{first.hi | host.hi, first.lo | host.lo}, int32(i)})
	}
	return table{v4: flatten(v4, fam4{}, ranges), v6: flatten(v6, fam6{}, ranges)}
}

// flatten makes the spans of one family's ranges, setting their parents.
// It sweeps the ranges by first address, the wider of two that start
// together first, keeping a stack of the ranges open at that point
// (each holding the one above it): a range closes, and its holder's
// span resumes after it, once the sweep is past its last address.
func flatten[K comparable, F family[K]](ext []extent[K], f F, ranges []rangeNode) spans[K] {
	var s spans[K]
	if len(ext) == 0 {
		return s
	}
	slices.SortFunc(ext, func(a, b extent[K]) int {
		if c := f.compare(a.first, b.first); c != 0 {
			return c
		}
		return f.compare(b.last, a.last)
	})
	s.starts = make([]K, 0, 2*len(ext)+1)
	s.ranges = make([]int32, 0, 2*len(ext)+1)
	var zero K
	s.emit(zero, -1)
	var open []extent[K]
	top := func() int32 {
		if len(open) == 0 {
			return -1
		}
		return open[len(open)-1].index
	}
	closeBefore := func(first K, all bool) {
		for len(open) > 0 && (all || f.compare(open[len(open)-1].last, first) < 0) {
			q := open[len(open)-1]
			open = open[:len(open)-1]
			if after, ok := f.next(q.last); ok {
				s.emit(after, top())
			}
		}
	}
	for _, e := range ext {
		closeBefore(e.first, false)
		ranges[e.index].parent = top()
		s.emit(e.first, e.index)
		open = append(open, e)
	}
	closeBefore(zero, true)
	// Held for the List's life: no room to spare.
	s.starts = slices.Clone(s.starts)
	s.ranges = slices.Clone(s.ranges)
	fillBuckets(&s, f)
	return s
}

// fillBuckets fills the buckets of s: buckets[b] is the last span that starts
// before bucket b (span 0 counting as before them all), so that the
// spans of bucket b are buckets[b] to buckets[b+1].
func fillBuckets[K comparable, F family[K]](s *spans[K], f F) {
	n := len(s.starts)
	if n <= 2 {
		return // lookup needs no bucket
	}
	s.skip = uint8(f.common(s.starts[1], s.starts[n-1]))
	s.width = uint8(min(bits.Len(uint(n))-1, maxWidth, f.bits()-int(s.skip)))
	nb := 1 << s.width
	s.buckets = make([]int32, nb+1)
	j := 0
	for b := range nb + 1 {
		for j+1 < n && f.bucket(s.starts[j+1], s.skip, s.width) < uint32(b) {
			j++
		}
		s.buckets[b] = int32(j)
	}
}

// emit starts a span at start covered by the range at index r (-1 for
// none), replacing a span that started there and merging with the span
// before when that one has the same range.
func (s *spans[K]) emit(start K, r int32) {
	n := len(s.starts)
	if n > 0 && s.starts[n-1] == start {
		s.starts, s.ranges = s.starts[:n-1], s.ranges[:n-1]
		n--
	}
	if n > 0 && s.ranges[n-1] == r {
		return
	}
	s.starts = append(s.starts, start)
	s.ranges = append(s.ranges, r)
}
