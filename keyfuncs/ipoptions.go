package keyfuncs

import (
	"errors"
	"fmt"
	"net/textproto"
)

// Default prefix lengths by which clients are grouped.
const (
	defaultIPv4Prefix = 32 // every IPv4 address is its own client
	defaultIPv6Prefix = 56 // one typical IPv6 subscriber allocation
)

// IPOption configures a [ClientIP]. A bad value makes NewClientIP return
// an error.
type IPOption func(*ipConfig) error

// TrustedProxies declares the reverse proxies in front of the server, as
// CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or bare addresses (taken
// as /32 or /128); calling it several times adds to the list. Only when
// the socket peer is one of them is a forwarding header read:
// X-Forwarded-For (or Forwarded, with [UseForwarded]) is walked from the
// right, trusted entries skipped, and the first entry outside them is the
// client; an entry that is not an address ends the walk at the trusted hop
// that reported it.
//
// No entry, an unparsable entry, an address with a zone and a /0 prefix
// are errors: trusting every address would let any client choose its own
// key. A prefix written in IPv4-mapped form (::ffff:10.0.0.0/104) is
// stored as IPv4, as addresses are.
func TrustedProxies(cidrs ...string) IPOption {
	return func(c *ipConfig) error {
		if len(cidrs) == 0 {
			return errors.New("TrustedProxies: no proxy")
		}
		for _, s := range cidrs {
			p, err := parseTrustedPrefix(s)
			if err != nil {
				return err
			}
			c.proxies = append(c.proxies, p)
		}
		return nil
	}
}

// UseForwarded makes [ClientIP] walk the RFC 7239 Forwarded header (its for=
// parameters) instead of X-Forwarded-For. It requires [TrustedProxies]
// and cannot be combined with [TrustedHeader].
func UseForwarded() IPOption {
	return func(c *ipConfig) error {
		c.forwarded = true
		return nil
	}
}

// TrustedHeader names a header, set by a CDN or load balancer you trust,
// that holds the client's address ("CF-Connecting-IP", "X-Real-IP",
// "Fly-Client-IP"). The proxy must overwrite any value the client sent:
// True-Client-IP, Fastly-Client-IP and X-Azure-ClientIP are passed through
// from the client by default in the products that set them.
//
// With [TrustedProxies], the header is read only from a trusted peer.
// Without it, the header is read from any peer: you assert that nothing
// but your proxy can reach the server. The header must hold a single
// address (a port is tolerated); otherwise the peer is the client. When
// the header appears on several lines, the last one, written by the hop
// nearest the server, is read. X-Forwarded-For and Forwarded are not read
// when a TrustedHeader is set. An invalid header name is an error.
func TrustedHeader(name string) IPOption {
	return func(c *ipConfig) error {
		if !validToken(name) {
			return fmt.Errorf("TrustedHeader: invalid header name %q", name)
		}
		c.header = textproto.CanonicalMIMEHeaderKey(name)
		return nil
	}
}

// Prefixes groups clients by the first v4 bits of their IPv4 address, 1
// to 32, and the first v6 bits of their IPv6 address, 1 to 128; any other
// value is an error. The default is Prefixes(32, 56): every IPv4 address
// is its own client ("ip:203.0.113.7"), and IPv6 clients are grouped by
// /56, one typical subscriber allocation ("ip:2001:db8:1:100::/56" for
// 2001:db8:1:1a0::7). Under Prefixes(24, 128) the key of 203.0.113.7 is
// "ip:203.0.113.0/24", and that of 2001:db8:1:1a0::7 "ip:2001:db8:1:1a0::7".
func Prefixes(v4, v6 int) IPOption {
	return func(c *ipConfig) error {
		if v4 < 1 || v4 > 32 {
			return fmt.Errorf("Prefixes(%d, %d): want an IPv4 prefix of 1 to 32", v4, v6)
		}
		if v6 < 1 || v6 > 128 {
			return fmt.Errorf("Prefixes(%d, %d): want an IPv6 prefix of 1 to 128", v4, v6)
		}
		c.v4bits, c.v6bits = v4, v6
		return nil
	}
}
