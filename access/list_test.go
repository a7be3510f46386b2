package access_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func TestNewListRejects(t *testing.T) {
	good := access.Entry{Prefix: pfx("10.0.0.0/8")}
	tests := []struct {
		name string
		bad  access.Entry
		msg  string
	}{
		{"neither", access.Entry{Reason: "x"}, "neither Prefix nor Key"},
		{"both", access.Entry{Prefix: pfx("10.0.0.0/8"), Key: "user:1"}, "both Prefix and Key"},
		{"invalid prefix", access.Entry{Prefix: netip.PrefixFrom(addr("10.0.0.1"), 33)}, "invalid prefix"},
		{"control in key", access.Entry{Key: "user:\n1"}, "key has a control character (U+000A) at byte 6"},
		{"NUL in key", access.Entry{Key: "user:\x001"}, "key has a NUL byte"},
		{"invalid UTF-8 in key", access.Entry{Key: "user:\xc3"}, "invalid UTF-8"},
		{"long key", access.Entry{Key: strings.Repeat("k", access.MaxFieldLen+1)}, "over the limit of 1024"},
		{"control in reason", access.Entry{Key: "user:1", Reason: "a\tb"}, "reason has a control character"},
		{"long reason", access.Entry{Prefix: pfx("::/0"), Reason: strings.Repeat("r", access.MaxFieldLen+1)}, "reason is 1025 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := access.NewList(good, good, tt.bad, good)
			assert.Nil(t, l, "nothing half-applied")
			require.ErrorIs(t, err, access.ErrInvalidEntry)
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.Contains(t, err.Error(), "entries[2]: ")
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestListMatch(t *testing.T) {
	l, err := access.NewList(
		access.Entry{Prefix: pfx("10.0.0.0/8"), Reason: "corp"},
		access.Entry{Prefix: pfx("10.1.0.0/16"), Reason: "lab"},
		access.Entry{Prefix: pfx("203.0.113.7/32"), Reason: "one host"},
		access.Entry{Prefix: pfx("2001:db8::/32"), Reason: "v6 doc"},
		access.Entry{Prefix: netip.PrefixFrom(addr("192.0.2.77"), 24), Reason: "masked"},
		access.Entry{Prefix: pfx("::ffff:198.51.100.0/120"), Reason: "mapped"},
		access.Entry{Prefix: pfx("::/0"), Reason: "all v6"},
		access.Entry{Key: "user:42", Reason: "vip"},
	)
	require.NoError(t, err)
	assert.Equal(t, 8, access.Size(l))
	tests := []struct {
		addr, key string
		reason    string // "" for no match
	}{
		{"10.2.3.4", "", "corp"},
		{"10.1.3.4", "", "lab"},
		{"11.0.0.1", "", ""},
		{"203.0.113.7", "", "one host"},
		{"203.0.113.8", "", ""},
		{"2001:db8:1::5", "", "v6 doc"},
		{"2001:db9::5", "", "all v6"},
		{"192.0.2.1", "", "masked"},
		{"198.51.100.9", "", "mapped"},
		{"::ffff:10.1.0.1", "", "lab"}, // an IPv4-mapped address is folded to IPv4 ...
		{"::ffff:11.0.0.1", "", ""},    // ... and so is not covered by ::/0
		{"fe80::1%eth0", "", "all v6"}, // the zone is dropped
		{"11.0.0.1", "user:42", "vip"}, // the key matches where the address does not
		{"10.1.0.1", "user:42", "vip"}, // and is preferred when both do
		{"11.0.0.1", "user:43", ""},    // keys match exactly
		{"11.0.0.1", "user:4", ""},     //
		{"", "user:42", "vip"},         // an invalid address still lets the key match
		{"", "", ""},                   //
		{"11.0.0.1", "10.1.0.1", ""},   // a key is never read as an address
		{"203.0.113.7", "203.0.113.7", "one host"},
	}
	for _, tt := range tests {
		t.Run(tt.addr+"|"+tt.key, func(t *testing.T) {
			var a netip.Addr
			if tt.addr != "" {
				a = addr(tt.addr)
			}
			e, ok := l.Match(a, tt.key, t0)
			assert.Equal(t, tt.reason != "", ok)
			assert.Equal(t, tt.reason, e.Reason)
		})
	}

	var nilList *access.List
	_, ok := nilList.Match(addr("10.0.0.1"), "user:42", t0)
	assert.False(t, ok)
	assert.Zero(t, access.Size(nilList))

	empty, err := access.NewList()
	require.NoError(t, err)
	_, ok = empty.Match(addr("10.0.0.1"), "user:42", t0)
	assert.False(t, ok)
}

func TestListExpiry(t *testing.T) {
	t1, t2, t3 := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	l, err := access.NewList(
		access.Entry{Prefix: pfx("10.0.0.0/8"), Expires: t3, Reason: "/8 until t3"},
		access.Entry{Prefix: pfx("10.1.0.0/16"), Reason: "/16 permanent"},
		access.Entry{Prefix: pfx("10.1.2.0/24"), Expires: t1, Reason: "/24 until t1"},
		access.Entry{Prefix: pfx("10.1.2.3/32"), Expires: t2, Reason: "/32 until t2"},
		access.Entry{Prefix: pfx("10.9.0.0/16"), Expires: t1, Reason: "/16 until t1"},
		access.Entry{Prefix: pfx("10.9.9.0/24"), Expires: t2, Reason: "/24 until t2"},
		// Duplicates collapse to the one that lives longest.
		access.Entry{Prefix: pfx("192.0.2.0/24"), Expires: t1, Reason: "dup until t1"},
		access.Entry{Prefix: pfx("192.0.2.0/24"), Expires: t2, Reason: "dup until t2"},
		access.Entry{Prefix: pfx("192.0.2.0/24"), Expires: t1, Reason: "dup until t1 again"},
		access.Entry{Key: "user:1", Expires: t2, Reason: "key until t2"},
		access.Entry{Key: "user:1", Expires: t1, Reason: "key until t1"},
		access.Entry{Key: "user:2", Reason: "key permanent"},
		access.Entry{Key: "user:2", Expires: t3, Reason: "key until t3"},
		access.Entry{Key: "user:3", Expires: t0, Reason: "expired from the start"},
	)
	require.NoError(t, err)
	assert.Equal(t, 10, access.Size(l))

	check := func(now time.Time, a, key, want string) {
		t.Helper()
		e, ok := l.Match(addr(a), key, now)
		assert.Equal(t, want != "", ok, "%s %s at %v", a, key, now)
		assert.Equal(t, want, e.Reason, "%s %s at %v", a, key, now)
	}
	before := t0.Add(-time.Second)
	check(before, "10.1.2.3", "", "/32 until t2")
	check(t1.Add(-time.Nanosecond), "10.1.2.4", "", "/24 until t1")
	check(t1, "10.1.2.4", "", "/16 permanent") // Expires is the first instant it no longer matches
	check(t1, "10.1.2.3", "", "/32 until t2")
	check(t2, "10.1.2.3", "", "/16 permanent") // past two expired levels
	check(t2, "10.2.0.1", "", "/8 until t3")
	check(t3, "10.2.0.1", "", "")
	check(t3, "10.1.2.3", "", "/16 permanent")
	check(t0, "10.9.9.9", "", "/24 until t2")
	check(t1, "10.9.9.9", "", "/24 until t2")
	check(t2, "10.9.9.9", "", "/8 until t3") // an expired /24 and an expired /16 fall back to the live /8
	check(t3, "10.9.9.9", "", "")
	check(t1, "192.0.2.1", "", "dup until t2")
	check(t2, "192.0.2.1", "", "")
	check(t1, "11.0.0.1", "user:1", "key until t2")
	check(t2, "11.0.0.1", "user:1", "")
	check(t3.Add(time.Hour), "11.0.0.1", "user:2", "key permanent")
	check(before, "11.0.0.1", "user:3", "expired from the start")
	check(t0, "11.0.0.1", "user:3", "")
	check(t2, "10.2.0.1", "user:1", "/8 until t3") // an expired key falls through to the address
}

// naive is the reference: the longest live prefix containing the address,
// ties (duplicates) to the entry living longest.
type naive []access.Entry

func (n naive) Match(a netip.Addr, key string, now time.Time) (access.Entry, bool) {
	a = a.Unmap().WithZone("")
	var best access.Entry
	found := false
	if key != "" {
		for _, e := range n {
			if e.Key == key && (e.Expires.IsZero() || now.Before(e.Expires)) && (!found || longer(e, best)) {
				best, found = e, true
			}
		}
		if found {
			return best, true
		}
	}
	for _, e := range n {
		if e.Key != "" || !(e.Expires.IsZero() || now.Before(e.Expires)) || !e.Prefix.Contains(a) {
			continue
		}
		if !found || e.Prefix.Bits() > best.Prefix.Bits() || e.Prefix.Bits() == best.Prefix.Bits() && longer(e, best) {
			best, found = e, true
		}
	}
	return best, found
}

func longer(a, b access.Entry) bool {
	if b.Expires.IsZero() {
		return false
	}
	return a.Expires.IsZero() || a.Expires.After(b.Expires)
}

// randAddr draws an address near the base so that random prefixes nest
// and overlap: IPv4 in 10.0.0.0/8 and 0.0.0.0/0, IPv6 in 2001:db8::/32.
func randAddr(r *rand.Rand, v6 bool) netip.Addr {
	if v6 {
		var b [16]byte
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
		for i := 4; i < 16; i++ {
			b[i] = byte(r.IntN(4)) // few distinct values: many nested hits
		}
		if r.IntN(8) == 0 {
			for i := range b {
				b[i] = byte(r.Uint32())
			}
		}
		return netip.AddrFrom16(b)
	}
	b := [4]byte{10, byte(r.IntN(4)), byte(r.IntN(4)), byte(r.IntN(8))}
	if r.IntN(8) == 0 {
		b = [4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}
	}
	return netip.AddrFrom4(b)
}

func randEntries(r *rand.Rand, n int, base time.Time) []access.Entry {
	out := make([]access.Entry, 0, n)
	for range n {
		var e access.Entry
		if r.IntN(10) == 0 {
			e.Key = fmt.Sprintf("user:%d", r.IntN(50))
		} else {
			a := randAddr(r, r.IntN(2) == 0)
			bits := 16 + r.IntN(113)
			if a.Is4() {
				bits = 4 + r.IntN(29)
			}
			e.Prefix = netip.PrefixFrom(a, bits).Masked()
		}
		if r.IntN(2) == 0 {
			e.Expires = base.Add(time.Duration(r.IntN(100)) * time.Second)
		}
		e.Reason = fmt.Sprint(len(out))
		out = append(out, e)
	}
	return out
}

func TestListMatchesNaiveScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		entries := randEntries(r, 50+r.IntN(400), t0)
		l, err := access.NewList(entries...)
		require.NoError(t, err)
		ref := naive(entries)
		for range 2000 {
			a := randAddr(r, r.IntN(2) == 0)
			switch r.IntN(6) {
			case 0:
				if a.Is4() {
					a = netip.AddrFrom16(a.As16()) // IPv4-mapped
				}
			case 1:
				if a.Is6() {
					a = a.WithZone("eth0")
				}
			}
			key := ""
			if r.IntN(4) == 0 {
				key = fmt.Sprintf("user:%d", r.IntN(60))
			}
			now := t0.Add(time.Duration(r.IntN(110)) * time.Second)
			got, gotOK := l.Match(a, key, now)
			want, wantOK := ref.Match(a, key, now)
			require.Equal(t, wantOK, gotOK, "round %d: %v %q at %v", round, a, key, now)
			if wantOK {
				// Equal prefix and lifetime: a duplicate may differ in Reason only.
				require.Equal(t, want.Prefix, got.Prefix, "round %d: %v %q at %v", round, a, key, now)
				require.Equal(t, want.Key, got.Key)
				require.True(t, want.Expires.Equal(got.Expires), "round %d: %v %q at %v: %v, want %v", round, a, key, now, got, want)
			}
		}
	}
}

// TestListEdges: ranges at both ends of each address space, and nested
// ranges that end together, against the naive scan.
func TestListEdges(t *testing.T) {
	t1 := t0.Add(time.Minute)
	var entries []access.Entry
	for i, p := range []string{
		"0.0.0.0/0", "0.0.0.0/32", "255.255.255.0/24", "255.255.255.255/32",
		"10.0.0.0/8", "10.255.0.0/16", "10.255.255.0/24", "10.255.255.255/32", "11.0.0.0/32",
		"::/0", "::/128", "ffff::/16", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
		"2001:db8::/32", "2001:db8:ffff:ffff:ffff:ffff:ffff:0/112", "2001:db8:ffff:ffff::/64", "2001:db9::/128",
	} {
		e := access.Entry{Prefix: pfx(p), Reason: p}
		if i%2 == 0 {
			e.Expires = t1
		}
		entries = append(entries, e)
	}
	l, err := access.NewList(entries...)
	require.NoError(t, err)
	ref := naive(entries)
	for _, a := range []string{
		"0.0.0.0", "0.0.0.1", "9.255.255.255", "10.0.0.0", "10.254.255.255", "10.255.0.0", "10.255.255.254",
		"10.255.255.255", "11.0.0.0", "11.0.0.1", "255.255.254.255", "255.255.255.0", "255.255.255.254", "255.255.255.255",
		"::", "::1", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
		"2001:db8:ffff:ffff:ffff:ffff:fffe:ffff", "2001:db9::", "2001:db9::1", "fffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"ffff::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	} {
		for _, now := range []time.Time{t0, t1} {
			got, gotOK := l.Match(addr(a), "", now)
			want, wantOK := ref.Match(addr(a), "", now)
			require.Equal(t, wantOK, gotOK, "%s at %v", a, now)
			assert.Equal(t, want.Reason, got.Reason, "%s at %v", a, now)
		}
	}
}

// TestListMatchesNaiveScanAtEdges: ranges spread over the address
// spaces, probed at and beside both ends of each range, against the
// naive scan.
func TestListMatchesNaiveScanAtEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	entries := mixed(1000)
	for i := range entries {
		if r.IntN(3) == 0 {
			entries[i].Expires = t0.Add(time.Duration(1+r.IntN(9)) * time.Second)
		}
		entries[i].Reason = fmt.Sprint(i)
	}
	l, err := access.NewList(entries...)
	require.NoError(t, err)
	ref := naive(entries)
	last := func(p netip.Prefix) netip.Addr {
		b := p.Addr().AsSlice()
		for i := p.Bits(); i < len(b)*8; i++ {
			b[i/8] |= 0x80 >> (i % 8)
		}
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	for _, e := range entries {
		first, end := e.Prefix.Addr(), last(e.Prefix)
		for _, a := range []netip.Addr{first, first.Prev(), first.Next(), end, end.Prev(), end.Next()} {
			if !a.IsValid() {
				continue
			}
			now := t0.Add(time.Duration(r.IntN(10)) * time.Second)
			got, gotOK := l.Match(a, "", now)
			want, wantOK := ref.Match(a, "", now)
			require.Equal(t, wantOK, gotOK, "%v at %v", a, now)
			require.Equal(t, want.Prefix, got.Prefix, "%v at %v", a, now)
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	l, err := access.NewList(randEntries(rand.New(rand.NewPCG(3, 4)), 5000, t0)...)
	require.NoError(t, err)
	hit4, miss6 := addr("10.1.2.3"), addr("3fff::1")
	mapped := netip.AddrFrom16(hit4.As16())
	allocs := testing.AllocsPerRun(1000, func() {
		l.Match(hit4, "", t0)
		l.Match(miss6, "user:7", t0.Add(time.Minute))
		l.Match(mapped, "", t0)
	})
	assert.Zero(t, allocs)
}

// mixed builds n distinct prefixes, half IPv4 (/8 to /32) and half IPv6
// (/16 to /64), from a fixed seed.
func mixed(n int) []access.Entry {
	r := rand.New(rand.NewPCG(5, 6))
	seen := make(map[netip.Prefix]bool, n)
	out := make([]access.Entry, 0, n)
	for len(out) < n {
		var p netip.Prefix
		if len(out)%2 == 0 {
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}), 8+r.IntN(25)).Masked()
		} else {
			var b [16]byte
			b[0], b[1] = 0x20, byte(r.IntN(16))
			for i := 2; i < 8; i++ {
				b[i] = byte(r.Uint32())
			}
			p = netip.PrefixFrom(netip.AddrFrom16(b), 16+r.IntN(49)).Masked()
		}
		if seen[p] || p.Overlaps(benchMiss4) {
			continue
		}
		seen[p] = true
		out = append(out, access.Entry{Prefix: p, Reason: "bench"})
	}
	return out
}

// benchMiss4 is never listed by mixed, so that a lookup can miss.
var benchMiss4 = pfx("198.51.100.0/24")

func BenchmarkMatch(b *testing.B) {
	entries := mixed(100_000)
	v4 := 0
	for _, e := range entries {
		if e.Prefix.Addr().Is4() {
			v4++
		}
	}
	require.Equal(b, 50_000, v4, "100,000 ranges, half IPv4, half IPv6")
	withKeys := slices.Clone(entries)
	for i := range 1000 {
		withKeys = append(withKeys, access.Entry{Key: fmt.Sprintf("key:%032x", i)})
	}
	l, err := access.NewList(withKeys...)
	require.NoError(b, err)
	require.Equal(b, 101_000, access.Size(l))
	// Hits: an address inside a listed prefix (the longest match may be a
	// more specific entry). Misses: documentation ranges, never listed.
	hit4 := entries[2].Prefix.Addr().Next()
	hit6 := entries[3].Prefix.Addr().Next()
	cases := []struct {
		name string
		addr netip.Addr
		key  string
		hit  bool
	}{
		{"v4/hit", hit4, "", true},
		{"v4/miss", addr("198.51.100.1"), "", false},
		{"v6/hit", hit6, "", true},
		{"v6/miss", addr("3fff:ffff::1"), "", false},
		{"v4/miss+key/miss", addr("198.51.100.1"), "key:9f86d081884c7d659a2feaa0c55ad015", false},
		{"key/hit", addr("198.51.100.1"), fmt.Sprintf("key:%032x", 7), true},
	}
	// Mixed: 4096 addresses in turn, so that the table is not all in
	// cache: a quarter each v4 hits, v4 misses, v6 hits, v6 misses (the
	// misses random addresses, which a listed range may still cover).
	r := rand.New(rand.NewPCG(7, 8))
	var stream [4096]netip.Addr
	hits := 0
	for i := range stream {
		e := entries[r.IntN(len(entries))]
		switch i % 4 {
		case 0, 2:
			for e.Prefix.Addr().Is4() != (i%4 == 0) {
				e = entries[r.IntN(len(entries))]
			}
			stream[i] = e.Prefix.Addr().Next()
		case 1:
			stream[i] = netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		default:
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			stream[i] = netip.AddrFrom16(a)
		}
		if _, ok := l.Match(stream[i], "", t0); ok {
			hits++
		}
	}
	require.Greater(b, hits, len(stream)/2-1, "the hits hit")
	require.Less(b, hits, len(stream)*3/4, "most misses miss")
	b.Run("mixed", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Match(stream[i&(len(stream)-1)], "", t0)
			i++
		}
	})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			_, ok := l.Match(c.addr, c.key, t0)
			require.Equal(b, c.hit, ok)
			b.ReportAllocs()
			for b.Loop() {
				l.Match(c.addr, c.key, t0)
			}
		})
	}
}

func BenchmarkNewList(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		entries := mixed(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := access.NewList(entries...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListHeap reports the heap a List of 100,000 mixed ranges
// holds once built (heap-B/list), apart from its entries' reasons.
func BenchmarkListHeap(b *testing.B) {
	entries := mixed(100_000)
	var l *access.List
	var before, after runtime.MemStats
	var held uint64
	for b.Loop() {
		l = nil
		runtime.GC()
		runtime.ReadMemStats(&before)
		var err error
		l, err = access.NewList(entries...)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = after.HeapAlloc - before.HeapAlloc
	}
	runtime.KeepAlive(l)
	b.ReportMetric(float64(held), "heap-B/list")
}

func ExampleList() {
	entries, err := access.Parse(strings.NewReader(`
# office and VPN
198.51.100.0/24
2001:db8:42::/48   reason=VPN pool
user:42            expires=2027-01-01T00:00:00Z reason=partner trial
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	allow, err := access.NewList(entries...)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	// addr comes from the trusted-proxy model, never from a raw header.
	for _, c := range []struct {
		addr string
		key  string
	}{
		{"198.51.100.20", ""},
		{"2001:db8:42::7", ""},
		{"203.0.113.9", "user:42"},
		{"203.0.113.9", "user:7"},
	} {
		e, ok := allow.Match(netip.MustParseAddr(c.addr), c.key, now)
		fmt.Printf("%s %q: %v %v\n", c.addr, c.key, ok, e)
	}
	_, err = access.ParseEntry("10.0.0.0/33")
	fmt.Println(err)
	// Output:
	// 198.51.100.20 "": true 198.51.100.0/24
	// 2001:db8:42::7 "": true 2001:db8:42::/48
	// 203.0.113.9 "user:42": true user:42 expires=2027-01-01T00:00:00Z
	// 203.0.113.9 "user:7": false -
	// line 1, column 1: access: invalid entry: bad range "10.0.0.0/33": prefix length out of range
}
