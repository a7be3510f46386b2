package keyfuncs

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peerForms is a corpus of RemoteAddr forms, good and bad, for the tests
// that check a fast path against the full parse.
var peerForms = []string{
	// IPv4, bare and with a port.
	"203.0.113.7", "203.0.113.7:51234", "0.0.0.0", "255.255.255.255:65535", "1.2.3.4:0", "1.2.3.4:99999",
	"10.0.0.1:1", "192.168.1.1:080",
	// IPv4 oddities: leading zeros, out of range, short, long, bad ports.
	"01.2.3.4", "1.2.3.04:80", "256.1.1.1", "1.2.3", "1.2.3.4.5", "1.2.3.4:", "1.2.3.4:123456",
	"1.2.3.4:_obf", "1.2.3.4:_", "1.2.3.4:a", "1.2.3.4::80", "1.2.3.4 ", " 1.2.3.4", "1.2.3.4%eth0",
	"1..3.4", ".1.2.3.4", "1.2.3.4.", "1234.1.1.1", "1.2.3.4567", "[1.2.3.4]:80", "[1.2.3.4]",
	// IPv6, with and without brackets, port and zone.
	"2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443", "[2001:db8:1:1a0::7]:54321", "::1", "[::1]:80",
	"fe80::1%eth0", "[fe80::1%eth0]:1", "[fe80::1%]:1", "[fe80::1%eth0]x:1", "2001:DB8::A", "[2001:db8::1]:_x",
	// IPv4-mapped IPv6.
	"::ffff:203.0.113.8", "[::ffff:203.0.113.8]:1", "::ffff:cb00:7108", "[::ffff:10.0.0.1%eth0]:1",
	// Garbage.
	"", ":", "::", "[]", "[", "]", "unknown", "_hidden", "localhost:80", "1.2.3.4, 5.6.7.8", "@", "\x00",
	strings.Repeat("1", 200), "1.2.3.4:" + strings.Repeat("9", 200), "[" + strings.Repeat("a:", 100) + "]",
}

// TestParseIPv4PortAgrees: wherever the fast path recognises a form, the
// full parse gives the same address; and parseNode is the full parse.
func TestParseIPv4PortAgrees(t *testing.T) {
	fast := 0
	for _, s := range peerForms {
		full, fullOK := parseNodeFull(s)
		if a, ok := parseIPv4Port(s); ok {
			fast++
			require.True(t, fullOK, "%q: fast path accepts what the full parse refuses", s)
			assert.Equal(t, full, a, "%q", s)
		}
		a, ok := parseNode(s)
		assert.Equal(t, fullOK, ok, "%q", s)
		assert.Equal(t, full, a, "%q", s)
	}
	assert.Equal(t, 8, fast, "the corpus's plain IPv4 forms take the fast path")
}

func FuzzParseIPv4Port(f *testing.F) {
	for _, s := range peerForms {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := parseIPv4Port(s)
		full, fullOK := parseNodeFull(s)
		if ok && (!fullOK || a != full) {
			t.Fatalf("%q: fast %v, full %v (%v)", s, a, full, fullOK)
		}
		// Every canonical IPv4 form, with a port or not, takes the fast path.
		if fullOK && full.Is4() && (s == full.String() || strings.HasPrefix(s, full.String()+":") && !strings.Contains(s, "_")) && !ok {
			t.Fatalf("%q: canonical IPv4 %v missed the fast path", s, full)
		}
	})
}

// slowKey is the key of a request whose RemoteAddr is remote under r's
// defaults, by the full parse and format, with neither fast path nor
// cache.
func slowKey(r *ipResolver, remote string) (string, bool) {
	a, ok := parseNodeFull(remote)
	if !ok {
		return "", false
	}
	return r.format(a), true
}

// peerRequest is a fakeRequest that also gives its peer as a fastPeer.
type peerRequest struct {
	fakeRequest
	ap netip.AddrPort
	ok bool
}

func (r *peerRequest) PeerAddrPort() (netip.AddrPort, bool) { return r.ap, r.ok }

// fastPeer is matched by method set: Fiber's request, of another package,
// asserts the same interface literal, and these are it.
var (
	_ fastPeer = (*peerRequest)(nil)
	_ fastPeer = (interface {
		Request
		PeerAddrPort() (netip.AddrPort, bool)
	})(nil)
)

// TestPeerKeyFastPathAgrees: the key of every corpus form, through the
// fast parse and the cache (twice, so that the second is a hit), and
// through a fastPeer, is the key of the full parse and format; so is
// the error.
func TestPeerKeyFastPathAgrees(t *testing.T) {
	for name, opts := range map[string][]IPOption{
		"default":  nil,
		"prefixes": {Prefixes(24, 64)},
		"full":     {Prefixes(32, 128)},
		"proxies":  {TrustedProxies("10.0.0.0/8")},
	} {
		r := mustResolver(t, opts...)
		for _, s := range peerForms {
			want, ok := slowKey(r, s)
			for range 2 {
				got, err := r.key(req(s))
				if !ok {
					require.ErrorIs(t, err, ErrNoKey, "%s %q", name, s)
					continue
				}
				require.NoError(t, err, "%s %q", name, s)
				assert.Equal(t, want, got, "%s %q", name, s)
			}
			// A fastPeer whose AddrPort is what RemoteAddr says.
			ap, err := netip.ParseAddrPort(s)
			if err != nil {
				continue
			}
			pr := &peerRequest{fakeRequest: fakeRequest{remote: s}, ap: ap, ok: true}
			got, err := r.key(pr)
			if ap.Addr().Zone() != "" || !ok { // zoned: RemoteAddr is read instead
				fromText, terr := r.key(req(s))
				assert.Equal(t, fromText, got, "%s %q", name, s)
				assert.Equal(t, terr == nil, err == nil, "%s %q", name, s)
				continue
			}
			require.NoError(t, err, "%s %q", name, s)
			assert.Equal(t, want, got, "%s %q: fastPeer", name, s)
		}
	}
}

// TestPeerRequestNotOK: a fastPeer that cannot tell is read from
// RemoteAddr.
func TestPeerRequestNotOK(t *testing.T) {
	r := mustResolver(t)
	pr := &peerRequest{fakeRequest: fakeRequest{remote: "203.0.113.7:1"}, ap: netip.MustParseAddrPort("6.6.6.6:1")}
	got, err := r.key(pr)
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", got)
	pr.ok, pr.ap = true, netip.AddrPort{}
	got, err = r.key(pr)
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", got, "an invalid AddrPort is not an address")
}

// TestKeyCache: the cache returns what format does, for addresses that
// share a slot too; a busy client is cached after a few requests, and
// then costs no allocation; clients that take turns cost one allocation a
// request at most, as formatting their keys does.
func TestKeyCache(t *testing.T) {
	r := mustResolver(t)
	var addrs []netip.Addr
	v6 := netip.MustParseAddr("2001:db8::")
	for i := range 200 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{203, 0, byte(i / 100), byte(i)}))
		v6 = v6.Next()
		addrs = append(addrs, v6)
	}
	addrs = append(addrs, netip.MustParseAddr("2001:db8:1:1a0::7"), netip.IPv6Unspecified(), netip.IPv4Unspecified())
	for range 20 {
		for _, a := range addrs {
			require.Equal(t, r.format(a), r.keyOf(a), "%s", a)
		}
	}
	a := addrs[0]
	slot := &r.keys.slots[addrHash(a)%keyCacheSlots]
	for i := 0; i < 1000 && (slot.Load() == nil || slot.Load().addr != a); i++ {
		r.keyOf(a)
	}
	require.Equal(t, a, slot.Load().addr, "a busy client is cached")
	assert.Zero(t, testing.AllocsPerRun(100, func() { r.keyOf(a) }), "a hit")
	assert.LessOrEqual(t, testing.AllocsPerRun(1000, func() {
		r.keyOf(addrs[rand.IntN(len(addrs))])
	}), 1.0, "clients taking turns: formatting, and now and then an entry")

	q := req("203.0.113.7:51234")
	for range 1000 {
		_, _ = r.key(q)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = r.key(q) }), "the key of a busy IPv4 peer")
}

// TestKeyCacheConcurrent hammers the cache from several goroutines (run
// with -race).
func TestKeyCacheConcurrent(t *testing.T) {
	r := mustResolver(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				a := netip.AddrFrom4([4]byte{198, 51, byte(g), byte(i % 40)})
				if got, want := r.keyOf(a), r.format(a); got != want {
					t.Errorf("%s: %q, want %q", a, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
