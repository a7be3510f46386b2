package keyfuncs

import (
	"fmt"
	"net/netip"
	"strings"
)

// parseNode parses one address as it appears in RemoteAddr, in an
// X-Forwarded-For entry, in a single-address header or as the node of a
// Forwarded for= parameter:
//
//	203.0.113.7           bare IPv4
//	203.0.113.7:4711      IPv4 and port
//	2001:db8::1           bare IPv6 (optionally with %zone)
//	[2001:db8::1]         bracketed IPv6 (optionally with %zone)
//	[2001:db8::1]:4711    bracketed IPv6 and port
//
// A port may be digits or an RFC 7239 obfuscated port ("_abc"); it is
// checked and dropped. The result is normalised: IPv4-mapped IPv6 folded
// to IPv4, zone removed. Anything else ("unknown", "_hidden", a list,
// garbage) is not an address. Parsing costs no allocation on success.
func parseNode(s string) (netip.Addr, bool) {
	if a, ok := parseIPv4Port(s); ok {
		return a, true
	}
	return parseNodeFull(s)
}

// parseNodeFull is parseNode without its fast path for IPv4.
func parseNodeFull(s string) (netip.Addr, bool) {
	if s == "" || len(s) > maxNodeLen {
		return netip.Addr{}, false
	}
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 || !validPortSuffix(s[end+1:]) {
			return netip.Addr{}, false
		}
		host = s[1:end]
		if strings.IndexByte(host, ':') < 0 { // "[203.0.113.7]" is not IPv6
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// Exactly one colon: IPv4 and port (IPv6 has at least two).
		if !validPortSuffix(s[i:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
		if strings.IndexByte(host, '.') < 0 {
			return netip.Addr{}, false
		}
	}
	return parseHost(host)
}

// parseIPv4Port is parseNode's fast path for the common forms of an IPv4
// peer, "203.0.113.7" and "203.0.113.7:4711": four decimal octets of one
// to three digits, without leading zero, at most 255, and optionally ":"
// and one to five digits. ok is false for anything else, which parseNode
// then parses in full: whenever ok, parseNode's full parse gives the same
// address.
func parseIPv4Port(s string) (a netip.Addr, ok bool) {
	var ip [4]byte
	i := 0
	for field := range 4 {
		if field > 0 {
			if i == len(s) || s[i] != '.' {
				return netip.Addr{}, false
			}
			i++
		}
		start, n := i, 0
		for i < len(s) && i-start < 3 && '0' <= s[i] && s[i] <= '9' {
			n = n*10 + int(s[i]-'0')
			i++
		}
		if i == start || n > 255 || (s[start] == '0' && i-start > 1) {
			return netip.Addr{}, false
		}
		ip[field] = byte(n)
	}
	if i < len(s) {
		if s[i] != ':' || len(s)-i < 2 || len(s)-i > 6 {
			return netip.Addr{}, false
		}
		for i++; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return netip.Addr{}, false
			}
		}
	}
	return netip.AddrFrom4(ip), true
}

// parseHost parses a bare address, dropping an IPv6 zone before parsing
// (a zoned netip.Addr would cost an allocation) and unmapping IPv4.
func parseHost(host string) (netip.Addr, bool) {
	if i := strings.IndexByte(host, '%'); i >= 0 {
		if i == len(host)-1 || strings.IndexByte(host[:i], ':') < 0 {
			return netip.Addr{}, false // empty zone, or a zone on IPv4
		}
		host = host[:i]
	}
	if host == "" || !isAddrChars(host) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// isAddrChars reports whether s holds only characters of a textual IP
// address, so that most garbage is rejected before netip allocates an
// error for it.
func isAddrChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F', c == ':', c == '.':
		default:
			return false
		}
	}
	return true
}

// validPortSuffix reports whether s is "" or ":" followed by a port of 1
// to 5 digits or by an RFC 7239 obfuscated port ("_" then letters, digits,
// ".", "_" or "-").
func validPortSuffix(s string) bool {
	if s == "" {
		return true
	}
	if len(s) < 2 || s[0] != ':' {
		return false
	}
	port := s[1:]
	if port[0] == '_' {
		if len(port) == 1 {
			return false
		}
		for i := 1; i < len(port); i++ {
			if c := port[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	if len(port) > 5 {
		return false
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// parseTrustedPrefix parses one TrustedProxies entry.
func parseTrustedPrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.IndexByte(s, '/') >= 0 {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("TrustedProxies: %w", err)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("TrustedProxies: %w", err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("TrustedProxies: %q: zones are not allowed", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("TrustedProxies: %q trusts every address, so any client could choose its key; use TrustedHeader if only your proxy can reach the server", s)
	}
	return p.Masked(), nil
}

// trimOWS trims the optional white space (spaces and tabs) of HTTP.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// validToken reports whether s is a non-empty RFC 9110 token, the syntax
// of header names and of Forwarded parameter names.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	if isAlnum(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
