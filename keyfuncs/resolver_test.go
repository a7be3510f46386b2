package keyfuncs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustResolver(t testing.TB, opts ...IPOption) *ipResolver {
	t.Helper()
	r, err := newIPResolver(opts...)
	require.NoError(t, err)
	return r
}

type ipCase struct {
	name string
	req  *fakeRequest
	want string // key; "" means an error wrapping ErrNoKey
}

func runIPCases(t *testing.T, r *ipResolver, cases []ipCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.key(tc.req)
			if tc.want == "" {
				require.ErrorIs(t, err, ErrNoKey)
				require.Empty(t, got, "key returned with an error")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestIPDefaultIsPeer(t *testing.T) {
	forged := []string{
		"X-Forwarded-For", "6.6.6.6",
		"X-Real-IP", "6.6.6.6",
		"True-Client-IP", "6.6.6.6",
		"CF-Connecting-IP", "6.6.6.6",
		"Fly-Client-IP", "6.6.6.6",
		"Forwarded", "for=6.6.6.6",
	}
	runIPCases(t, mustResolver(t), []ipCase{
		{"ipv4 and port", req("203.0.113.7:1234"), "ip:203.0.113.7"},
		{"bare ipv4", req("203.0.113.7"), "ip:203.0.113.7"},
		{"ipv6 and port", req("[2001:db8:1:1a0::7]:443"), "ip:2001:db8:1:100::/56"},
		{"bare ipv6", req("2001:db8:1:1a0::7"), "ip:2001:db8:1:100::/56"},
		{"zone and port", req("[fe80::1%eth0]:80"), "ip:fe80::/56"},
		{"bare zone", req("fe80::1%eth0"), "ip:fe80::/56"},
		{"mapped and port", req("[::ffff:203.0.113.7]:80"), "ip:203.0.113.7"},
		{"bare mapped", req("::ffff:203.0.113.7"), "ip:203.0.113.7"},
		{"forged headers ignored", req("203.0.113.7:1", forged...), "ip:203.0.113.7"},
		{"forged headers ignored from private peer", req("10.0.0.1:1", forged...), "ip:10.0.0.1"},
		{"empty", req(""), ""},
		{"garbage", req("garbage"), ""},
		{"unix socket", req("@"), ""},
		{"empty port", req("203.0.113.7:"), ""},
		{"unclosed bracket", req("[2001:db8::1:80"), ""},
		{"bracketed ipv4", req("[203.0.113.7]:80"), ""},
		{"zone on ipv4", req("203.0.113.7%eth0"), ""},
		{"empty zone", req("fe80::1%"), ""},
		{"hostname", req("localhost:80"), ""},
		{"giant", req(strings.Repeat("1", 1<<20)), ""},
	})
}

func TestIPZeroResolver(t *testing.T) {
	var r ipResolver
	got, err := r.key(req("[2001:db8::1]:1", "X-Forwarded-For", "6.6.6.6"))
	require.NoError(t, err)
	require.Equal(t, "ip:2001:db8::/56", got)
}

func TestIPIsTheResolver(t *testing.T) {
	ip, err := clientIPKey(TrustedProxies("10.0.0.0/8"), Prefixes(24, 56))
	require.NoError(t, err)
	got, err := ip(req("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 198.51.100.1"))
	require.NoError(t, err)
	require.Equal(t, "ip:198.51.100.0/24", got)
}

func TestIPTrustedProxiesXFF(t *testing.T) {
	r := mustResolver(t, TrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1"))
	const xff = "X-Forwarded-For"
	runIPCases(t, r, []ipCase{
		{"untrusted peer ignores xff", req("203.0.113.9:1", xff, "198.51.100.1"), "ip:203.0.113.9"},
		{"one hop", req("10.0.0.1:1", xff, "198.51.100.1"), "ip:198.51.100.1"},
		{"bare ip proxy", req("192.0.2.1:1", xff, "198.51.100.1"), "ip:198.51.100.1"},
		{"ipv6 proxy", req("[2001:db8:ffff::1]:1", xff, "198.51.100.1"), "ip:198.51.100.1"},
		{"mapped peer is trusted", req("[::ffff:10.0.0.1]:1", xff, "198.51.100.1"), "ip:198.51.100.1"},
		{"zoned peer", req("[2001:db8:ffff::1%eth0]:1", xff, "198.51.100.1"), "ip:198.51.100.1"},
		{"forged entry left of client", req("10.0.0.1:1", xff, "6.6.6.6, 198.51.100.1"), "ip:198.51.100.1"},
		{"forged entries left of trusted hops", req("10.0.0.1:1", xff, "6.6.6.6, 7.7.7.7, 198.51.100.1, 10.0.0.3, 10.0.0.2"), "ip:198.51.100.1"},
		{"all trusted: leftmost", req("10.0.0.1:1", xff, "10.0.0.3, 10.0.0.2"), "ip:10.0.0.3"},
		{"no xff: peer", req("10.0.0.1:1"), "ip:10.0.0.1"},
		{"empty xff: peer", req("10.0.0.1:1", xff, ""), "ip:10.0.0.1"},
		{"multi-line", req("10.0.0.1:1", xff, "6.6.6.6, 198.51.100.1", xff, "10.0.0.2"), "ip:198.51.100.1"},
		{"multi-line client on first", req("10.0.0.1:1", xff, "198.51.100.1", xff, "10.0.0.3, 10.0.0.2"), "ip:198.51.100.1"},
		{"multi-line client on last", req("10.0.0.1:1", xff, "10.0.0.3", xff, "198.51.100.1"), "ip:198.51.100.1"},
		{"empty lines and elements", req("10.0.0.1:1", xff, "198.51.100.1,, ,", xff, "", xff, " , 10.0.0.2"), "ip:198.51.100.1"},
		{"garbage ends walk at last good", req("10.0.0.1:1", xff, "6.6.6.6, garbage, 10.0.0.2"), "ip:10.0.0.2"},
		{"unknown next to peer", req("10.0.0.1:1", xff, "6.6.6.6, unknown"), "ip:10.0.0.1"},
		{"obfuscated", req("10.0.0.1:1", xff, "6.6.6.6, _hidden, 10.0.0.2"), "ip:10.0.0.2"},
		{"garbage left of client", req("10.0.0.1:1", xff, "garbage, 198.51.100.1"), "ip:198.51.100.1"},
		{"list in one entry", req("10.0.0.1:1", xff, "6.6.6.6 198.51.100.1"), "ip:10.0.0.1"},
		{"mapped trusted alias skipped", req("10.0.0.1:1", xff, "198.51.100.1, ::ffff:10.0.0.5"), "ip:198.51.100.1"},
		{"mapped client folded", req("10.0.0.1:1", xff, "::ffff:198.51.100.1"), "ip:198.51.100.1"},
		{"ipv4 and port", req("10.0.0.1:1", xff, "198.51.100.1:5555"), "ip:198.51.100.1"},
		{"ipv6 and port", req("10.0.0.1:1", xff, "[2001:db8:1:1a0::7]:5555"), "ip:2001:db8:1:100::/56"},
		{"bare ipv6", req("10.0.0.1:1", xff, "2001:db8:1:1a0::7"), "ip:2001:db8:1:100::/56"},
		{"zoned client", req("10.0.0.1:1", xff, "fe80::1%eth0"), "ip:fe80::/56"},
		{"forwarded ignored without UseForwarded", req("10.0.0.1:1", "Forwarded", "for=6.6.6.6"), "ip:10.0.0.1"},
		{"header name case", req("10.0.0.1:1", "x-forwarded-for", "198.51.100.1"), "ip:198.51.100.1"},
		{"bad peer", req("nonsense", xff, "198.51.100.1"), ""},
	})
}

func TestIPTrustedProxiesForwarded(t *testing.T) {
	r := mustResolver(t, TrustedProxies("10.0.0.0/8", "::1"), UseForwarded())
	const fwd = "Forwarded"
	runIPCases(t, r, []ipCase{
		{"untrusted peer ignores forwarded", req("203.0.113.9:1", fwd, "for=198.51.100.1"), "ip:203.0.113.9"},
		{"one hop", req("10.0.0.1:1", fwd, "for=198.51.100.1"), "ip:198.51.100.1"},
		{"ipv6 loopback proxy", req("[::1]:1", fwd, "for=198.51.100.1"), "ip:198.51.100.1"},
		{"quoted ipv6 and port", req("10.0.0.1:1", fwd, `for="[2001:db8:cafe::17]:4711"`), "ip:2001:db8:cafe::/56"},
		{"quoted ipv6", req("10.0.0.1:1", fwd, `for="[2001:db8:cafe::17]"`), "ip:2001:db8:cafe::/56"},
		{"quoted ipv4 and port", req("10.0.0.1:1", fwd, `for="198.51.100.1:4711"`), "ip:198.51.100.1"},
		{"unquoted bracketed ipv6 tolerated", req("10.0.0.1:1", fwd, `for=[2001:db8:cafe::17]:4711`), "ip:2001:db8:cafe::/56"},
		{"obfuscated port", req("10.0.0.1:1", fwd, `for="198.51.100.1:_p1"`), "ip:198.51.100.1"},
		{"other params", req("10.0.0.1:1", fwd, "proto=http;For=192.0.2.60;by=203.0.113.43"), "ip:192.0.2.60"},
		{"case-insensitive name", req("10.0.0.1:1", fwd, "FOR=192.0.2.60"), "ip:192.0.2.60"},
		{"spaces around pairs", req("10.0.0.1:1", fwd, "for=192.0.2.60 ; proto=http"), "ip:192.0.2.60"},
		{"forged left of client", req("10.0.0.1:1", fwd, "for=6.6.6.6, for=198.51.100.1;proto=https, for=10.0.0.2"), "ip:198.51.100.1"},
		{"multi-line", req("10.0.0.1:1", fwd, "for=6.6.6.6, for=198.51.100.1", fwd, "for=10.0.0.2;by=10.0.0.1"), "ip:198.51.100.1"},
		{"all trusted: leftmost", req("10.0.0.1:1", fwd, "for=10.0.0.3, for=10.0.0.2"), "ip:10.0.0.3"},
		{"unknown", req("10.0.0.1:1", fwd, "for=6.6.6.6, for=unknown"), "ip:10.0.0.1"},
		{"obfuscated node", req("10.0.0.1:1", fwd, "for=6.6.6.6, for=_hidden, for=10.0.0.2"), "ip:10.0.0.2"},
		{"element without for", req("10.0.0.1:1", fwd, "for=6.6.6.6, proto=https"), "ip:10.0.0.1"},
		{"duplicate for", req("10.0.0.1:1", fwd, "for=6.6.6.6;for=198.51.100.1"), "ip:10.0.0.1"},
		{"quoted comma in param", req("10.0.0.1:1", fwd, `for=6.6.6.6, for=198.51.100.1;ext="a,b;c"`), "ip:198.51.100.1"},
		{"escaped quote in param", req("10.0.0.1:1", fwd, `for=6.6.6.6;x="\"", for=198.51.100.1;x="\",\""`), "ip:198.51.100.1"},
		{"escaped node", req("10.0.0.1:1", fwd, `for="\[2001:db8:cafe::17\]"`), "ip:2001:db8:cafe::/56"},
		{"unclosed quote to the left", req("10.0.0.1:1", fwd, `for="6.6.6.6, for=198.51.100.1, for=10.0.0.2`), "ip:198.51.100.1"},
		{"unclosed quote next to peer", req("10.0.0.1:1", fwd, `for=6.6.6.6, for="198.51.100.1`), "ip:10.0.0.1"},
		{"space around equals", req("10.0.0.1:1", fwd, "for = 198.51.100.1"), "ip:10.0.0.1"},
		{"empty value", req("10.0.0.1:1", fwd, "for="), "ip:10.0.0.1"},
		{"bad name", req("10.0.0.1:1", fwd, "f(r=198.51.100.1"), "ip:10.0.0.1"},
		{"mapped folded", req("10.0.0.1:1", fwd, `for="[::ffff:198.51.100.1]"`), "ip:198.51.100.1"},
		{"xff ignored with UseForwarded", req("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6"), "ip:10.0.0.1"},
	})
}

func TestIPTrustedHeader(t *testing.T) {
	const cf = "CF-Connecting-IP"
	alone := mustResolver(t, TrustedHeader("cf-connecting-ip"))
	runIPCases(t, alone, []ipCase{
		{"any peer", req("203.0.113.9:1", cf, "198.51.100.1"), "ip:198.51.100.1"},
		{"missing: peer", req("203.0.113.9:1"), "ip:203.0.113.9"},
		{"list: peer", req("203.0.113.9:1", cf, "198.51.100.1, 6.6.6.6"), "ip:203.0.113.9"},
		{"garbage: peer", req("203.0.113.9:1", cf, "garbage"), "ip:203.0.113.9"},
		{"two lines: last", req("203.0.113.9:1", cf, "6.6.6.6", cf, "198.51.100.1"), "ip:198.51.100.1"},
		{"spaces", req("203.0.113.9:1", cf, " 198.51.100.1 "), "ip:198.51.100.1"},
		{"mapped", req("203.0.113.9:1", cf, "::ffff:198.51.100.1"), "ip:198.51.100.1"},
		{"ipv6", req("203.0.113.9:1", cf, "2001:db8:1:1a0::7"), "ip:2001:db8:1:100::/56"},
		{"xff ignored", req("203.0.113.9:1", "X-Forwarded-For", "6.6.6.6"), "ip:203.0.113.9"},
		{"bad peer, good header", req("nonsense", cf, "198.51.100.1"), "ip:198.51.100.1"},
		{"bad peer, no header", req("nonsense"), ""},
	})
	withProxies := mustResolver(t, TrustedHeader("X-Real-IP"), TrustedProxies("10.0.0.0/8"))
	runIPCases(t, withProxies, []ipCase{
		{"untrusted peer", req("203.0.113.9:1", "X-Real-IP", "6.6.6.6"), "ip:203.0.113.9"},
		{"trusted peer", req("10.0.0.1:1", "X-Real-IP", "198.51.100.1"), "ip:198.51.100.1"},
		{"trusted peer, missing", req("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6"), "ip:10.0.0.1"},
		{"bad peer", req("nonsense", "X-Real-IP", "198.51.100.1"), ""},
	})
}

func TestIPPrefixes(t *testing.T) {
	cases := []struct {
		opts []IPOption
		peer string
		want string
	}{
		{nil, "2001:db8:1:1a0::7", "ip:2001:db8:1:100::/56"},
		{[]IPOption{Prefixes(32, 64)}, "2001:db8:1:1a0::7", "ip:2001:db8:1:1a0::/64"},
		{[]IPOption{Prefixes(32, 128)}, "2001:db8:1:1a0::7", "ip:2001:db8:1:1a0::7"},
		{[]IPOption{Prefixes(32, 1)}, "2001:db8:1:1a0::7", "ip:::/1"},
		{[]IPOption{Prefixes(24, 56)}, "203.0.113.7", "ip:203.0.113.0/24"},
		{[]IPOption{Prefixes(24, 56)}, "::ffff:203.0.113.7", "ip:203.0.113.0/24"},
		{[]IPOption{Prefixes(32, 56)}, "203.0.113.7", "ip:203.0.113.7"},
		{[]IPOption{Prefixes(32, 48), Prefixes(32, 64)}, "2001:db8:1:1a0::7", "ip:2001:db8:1:1a0::/64"},
		{[]IPOption{Prefixes(24, 64)}, "203.0.113.7", "ip:203.0.113.0/24"},
		{[]IPOption{Prefixes(24, 64)}, "2001:db8:1:1a0::7", "ip:2001:db8:1:1a0::/64"},
		{[]IPOption{Prefixes(1, 128)}, "203.0.113.7", "ip:128.0.0.0/1"},
	}
	for _, tc := range cases {
		got, err := mustResolver(t, tc.opts...).key(req(tc.peer))
		if assert.NoError(t, err, tc.peer) {
			assert.Equal(t, tc.want, got, tc.peer)
		}
	}
}

func TestIPv6SlashFiftySix(t *testing.T) {
	r := mustResolver(t)
	key := func(peer string) string {
		t.Helper()
		k, err := r.key(req(peer))
		require.NoError(t, err, peer)
		return k
	}
	base := key("[2001:db8:1:100::1]:1")
	for _, same := range []string{"2001:db8:1:100:ffff::1", "2001:db8:1:1ff::", "[2001:db8:1:142::7%eth1]:80"} {
		assert.Equal(t, base, key(same), "%s: same /56, same key", same)
	}
	for _, other := range []string{"2001:db8:1:200::1", "2001:db8:1:ff::1", "2001:db8:2:100::1"} {
		assert.NotEqual(t, base, key(other), "%s: key shared with another /56", other)
	}
	assert.Equal(t, key("1.2.3.4"), key("::ffff:1.2.3.4"), "IPv4-mapped address folded to IPv4")
	assert.Equal(t, "ip:1.2.3.4", key("[::ffff:1.2.3.4]:9"), "IPv4-mapped address folded to IPv4")
}

func TestIPBadOptions(t *testing.T) {
	cases := map[string][]IPOption{
		"unparsable cidr":           {TrustedProxies("nonsense")},
		"cidr bits out of range":    {TrustedProxies("10.0.0.0/33")},
		"empty cidr":                {TrustedProxies("")},
		"ipv4 trusts all":           {TrustedProxies("0.0.0.0/0")},
		"ipv6 trusts all":           {TrustedProxies("::/0")},
		"mapped trusts all":         {TrustedProxies("::ffff:0.0.0.0/96")},
		"zone":                      {TrustedProxies("fe80::1%eth0")},
		"ipv6 prefix 0":             {Prefixes(32, 0)},
		"ipv6 prefix 129":           {Prefixes(32, 129)},
		"ipv4 prefix 0":             {Prefixes(0, 56)},
		"ipv4 prefix 33":            {Prefixes(33, 56)},
		"ipv4 prefix negative":      {Prefixes(-1, 56)},
		"empty header":              {TrustedHeader("")},
		"header with space":         {TrustedHeader("X Real IP")},
		"header with colon":         {TrustedHeader("X-Real-IP:")},
		"forwarded without proxies": {UseForwarded()},
		"forwarded and header":      {TrustedProxies("10.0.0.0/8"), UseForwarded(), TrustedHeader("X-Real-IP")},
		"no proxy":                  {TrustedProxies()},
		"nil option":                {TrustedProxies("10.0.0.0/8"), nil},
		"bad after good":            {Prefixes(24, 64), Prefixes(40, 56)},
		"both prefixes bad":         {Prefixes(0, 0)},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			fn, err := clientIPKey(opts...)
			requireInvalid(t, fn, err)
		})
	}
}

func TestIPGoodOptions(t *testing.T) {
	r := mustResolver(t,
		TrustedProxies(" 10.0.0.1/8 "), // not masked, spaces: accepted
		TrustedProxies("::ffff:192.168.0.0/112", "::1"),
	)
	for _, peer := range []string{"10.9.9.9:1", "192.168.3.4:1", "[::1]:1"} {
		got, err := r.key(req(peer, "X-Forwarded-For", "198.51.100.1"))
		if assert.NoError(t, err, "peer %s", peer) {
			assert.Equal(t, "ip:198.51.100.1", got, "peer %s is a proxy: the key is the client's", peer)
		}
	}
}

func TestIPHostileHeaders(t *testing.T) {
	r := mustResolver(t, TrustedProxies("10.0.0.0/8"))
	fr := mustResolver(t, TrustedProxies("10.0.0.0/8"), UseForwarded())
	const xff = "X-Forwarded-For"
	junk := strings.Repeat("6.6.6.6, ", 1<<17) // over a megabyte
	manyTrusted := strings.Repeat("10.0.0.9, ", maxHops+8)
	manyLines := make([]string, 0, 100001)
	manyLines = append(manyLines, "198.51.100.1")
	for range 100000 {
		manyLines = append(manyLines, "")
	}
	cases := []struct {
		name string
		r    *ipResolver
		req  *fakeRequest
		want string
	}{
		{"giant junk to the left", r, req("10.0.0.1:1", xff, junk+"198.51.100.1, 10.0.0.2"), "ip:198.51.100.1"},
		{"giant single entry", r, req("10.0.0.1:1", xff, strings.Repeat("1", 1<<20)), "ip:10.0.0.1"},
		{"giant entry left of client", r, req("10.0.0.1:1", xff, strings.Repeat("1", 1<<20)+", 198.51.100.1"), "ip:198.51.100.1"},
		{"commas only", r, req("10.0.0.1:1", xff, strings.Repeat(",", 1<<20)), "ip:10.0.0.1"},
		{"hop cap: last good", r, req("10.0.0.1:1", xff, "198.51.100.1, "+manyTrusted+"10.0.0.2"), "ip:10.0.0.9"},
		{"many empty lines", r, &fakeRequest{remote: "10.0.0.1:1", headers: map[string][]string{xff: manyLines}}, "ip:10.0.0.1"},
		{"forwarded giant junk", fr, req("10.0.0.1:1", "Forwarded", strings.Repeat(`for="6.6.6.6", `, 1<<16)+"for=198.51.100.1"), "ip:198.51.100.1"},
		{"forwarded giant quote", fr, req("10.0.0.1:1", "Forwarded", `for="`+strings.Repeat(`\"`, 1<<19)+`"`), "ip:10.0.0.1"},
		{"forwarded giant element", fr, req("10.0.0.1:1", "Forwarded", "for=198.51.100.1;x="+strings.Repeat("a", 1<<20)), "ip:10.0.0.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.key(tc.req)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			// The walk itself must not allocate, whatever the input.
			peer, _ := peerAddr(tc.req)
			allocs := testing.AllocsPerRun(10, func() {
				tc.r.walk(tc.req.HeaderValues(xff), peer)
				tc.r.walk(tc.req.HeaderValues("Forwarded"), peer)
			})
			assert.Zero(t, allocs, "walk: allocations")
		})
	}
}
