package keyfuncs

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// Fuzz inputs hold several header lines separated by "\n".
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func FuzzClientIP(f *testing.F) {
	for _, seed := range [][4]string{
		{"203.0.113.7:1234", "6.6.6.6", "for=6.6.6.6", "6.6.6.6"},
		{"10.0.0.1:1", "6.6.6.6, 198.51.100.1, 10.0.0.2", `for=6.6.6.6, for="[2001:db8::1]:4711"`, "198.51.100.1"},
		{"[::1]:80", "10.0.0.3\n10.0.0.2", "for=10.0.0.3\nfor=10.0.0.2", "garbage"},
		{"[::ffff:10.0.0.1]:1", "::ffff:198.51.100.1, unknown", `For="_hidden";proto=http`, "::ffff:198.51.100.1"},
		{"[fe80::1%eth0]:1", "fe80::1%eth0, ,,", `for="\[::1\]"`, "[2001:db8::1]:80"},
		{"10.0.0.1", "garbage, 198.51.100.1", `for="6.6.6.6, for=198.51.100.1;x="a,b"`, "1.1.1.1, 2.2.2.2"},
		{"nonsense", "198.51.100.1", "for=198.51.100.1", "198.51.100.1"},
		{"10.0.0.1:1", strings.Repeat("10.0.0.9,", 40), strings.Repeat(`for="\"",`, 40), ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	proxies := TrustedProxies("10.0.0.0/8", "::1")
	def := mustResolver(f)
	xff := mustResolver(f, proxies)
	fwd := mustResolver(f, proxies, UseForwarded())
	hdr := mustResolver(f, proxies, TrustedHeader("X-Real-IP"))
	hdrAlone := mustResolver(f, TrustedHeader("X-Real-IP"))
	const client = "198.51.100.77"
	wantClient := netip.MustParseAddr(client)

	f.Fuzz(func(t *testing.T, remote, xffVal, fwdVal, hdrVal string) {
		r := &fakeRequest{remote: remote, headers: map[string][]string{
			headerXFF:       lines(xffVal),
			headerForwarded: lines(fwdVal),
			"X-Real-Ip":     lines(hdrVal),
		}}
		peer, perr := peerAddr(r)
		got := map[string]netip.Addr{}
		for name, res := range map[string]*ipResolver{"def": def, "xff": xff, "fwd": fwd, "hdr": hdr, "hdrAlone": hdrAlone} {
			a, err := res.clientIP(r)
			key, kerr := res.key(r)
			if (err == nil) != (kerr == nil) {
				t.Fatalf("%s: ClientIP err %v, Key err %v", name, err, kerr)
			}
			if err != nil {
				if !errors.Is(err, ErrNoKey) || key != "" {
					t.Fatalf("%s: Key = %q, %v", name, key, err)
				}
				continue
			}
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
				t.Fatalf("%s: unnormalised address %v", name, a)
			}
			if !strings.HasPrefix(key, "ip:") || len(key) < 5 {
				t.Fatalf("%s: key %q", name, key)
			}
			got[name] = a
		}

		// With no trusted proxy, the client is the peer, whatever the headers.
		if a, ok := got["def"]; ok != (perr == nil) || a != peer {
			t.Fatalf("default resolver chose %v (ok %v), peer is %v (%v)", a, ok, peer, perr)
		}
		// From an untrusted peer, no header is believed.
		if perr == nil && !xff.trusted(peer) {
			for _, name := range []string{"xff", "fwd", "hdr"} {
				if got[name] != peer {
					t.Fatalf("%s: untrusted peer %v, chose %v", name, peer, got[name])
				}
			}
		}
		// The X-Forwarded-For walk agrees with a naive one on small input.
		if perr == nil && xff.trusted(peer) && len(xffVal) < maxHeaderBytes/2 {
			if want := naiveXFF(xff, lines(xffVal), peer); got["xff"] != want {
				t.Fatalf("xff: chose %v, naive walk %v", got["xff"], want)
			}
		}
		// TrustedHeader alone: the header if it is one address, else the peer.
		if a, ok := parseNode(trimOWS(last(lines(hdrVal)))); ok && got["hdrAlone"] != a {
			t.Fatalf("hdrAlone: chose %v, header holds %v", got["hdrAlone"], a)
		}

		// Whatever the client wrote, an entry appended by a trusted proxy wins.
		for _, appended := range []*fakeRequest{
			{remote: "10.0.0.1:1", headers: map[string][]string{
				headerXFF:       {xffVal + ", " + client},
				headerForwarded: {fwdVal + `, for="` + client + `:4711"`},
			}},
			{remote: "[::1]:1", headers: map[string][]string{
				headerXFF:       append(lines(xffVal), client+", 10.1.2.3"),
				headerForwarded: append(lines(fwdVal), "for="+client+";proto=https, for=10.1.2.3"),
			}},
		} {
			for name, res := range map[string]*ipResolver{"xff": xff, "fwd": fwd} {
				if a, err := res.clientIP(appended); err != nil || a != wantClient {
					t.Fatalf("%s: appended client: chose %v, %v", name, a, err)
				}
			}
		}
	})
}

// naiveXFF is the X-Forwarded-For walk written plainly, without limits on
// bytes (its callers keep the input small).
func naiveXFF(r *ipResolver, lines []string, peer netip.Addr) netip.Addr {
	var entries []string
	for _, l := range lines {
		for _, e := range strings.Split(l, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				entries = append(entries, e)
			}
		}
	}
	lastGood := peer
	for i, n := len(entries)-1, 0; i >= 0 && n < maxHops; i, n = i-1, n+1 {
		a, ok := parseNode(entries[i])
		if !ok {
			return lastGood
		}
		if !r.trusted(a) {
			return a
		}
		lastGood = a
	}
	return lastGood
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

func FuzzForwarded(f *testing.F) {
	for _, seed := range []string{
		"for=192.0.2.60;proto=http;by=203.0.113.43",
		`for="[2001:db8:cafe::17]:4711"`,
		"for=192.0.2.43, for=198.51.100.17",
		"for=unknown, for=_hidden\nFOR=\"_x\";by=_y",
		`for="\"", for="\\", x="a,b;c"`,
		`for="6.6.6.6, for=198.51.100.1;x=""`,
		";;, ,;for=1.2.3.4;;",
		`for="[::ffff:1.2.3.4%eth0]:_p"`,
	} {
		f.Add(seed)
	}
	want := netip.MustParseAddr("2001:db8::77")
	f.Fuzz(func(t *testing.T, header string) {
		for _, forwarded := range []bool{true, false} {
			s := hopScanner{lines: lines(header), budget: maxHeaderBytes, forwarded: forwarded}
			// Each call consumes budget, so the scan ends within budget+1 calls.
			for i := 0; ; i++ {
				if i > maxHeaderBytes+1 {
					t.Fatal("scanner does not terminate")
				}
				node, st := s.next()
				if st != hopNode {
					break
				}
				if a, ok := parseNode(node); ok {
					if !a.IsValid() || a.Is4In6() || a.Zone() != "" {
						t.Fatalf("unnormalised address %v from %q", a, node)
					}
					if b, ok := parseNode(a.String()); !ok || b != a {
						t.Fatalf("%v does not round-trip", a)
					}
				}
			}
		}
		forwardedFor(header)

		// A well-formed element appended by a proxy is read first, however
		// the client-controlled text to its left is malformed.
		for _, hdr := range [][]string{
			{header + `, for="[2001:db8::77]:4711";proto=https`},
			append(lines(header), `For=[2001:db8::77]`),
		} {
			s := hopScanner{lines: hdr, budget: maxHeaderBytes, forwarded: true}
			node, st := s.next()
			if a, ok := parseNode(node); st != hopNode || !ok || a != want {
				t.Fatalf("appended element: got %q (%v), want %v", node, st, want)
			}
		}
	})
}
