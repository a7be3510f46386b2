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

// IPOption configures [IP]. A bad value makes IP return an error.
type IPOption func(*ipConfig) error

// TrustedProxies declares the reverse proxies in front of the server, as
// CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or bare addresses (taken
// as /32 or /128). Only when the socket peer falls in one of them are
// forwarding headers read; see [IP]. Calling it several times adds to
// the list.
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

// UseForwarded makes [IP] walk the RFC 7239 Forwarded header (its for=
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
// "Fly-Client-IP"). The proxy must overwrite any value the client sent.
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

// IPv6Prefix groups IPv6 clients by their first bits bits, 1 to 128 (any
// other value is an error); the default is 56. The key of
// 2001:db8:1:1a0::7 under the default is "ip:2001:db8:1:100::/56"; under
// 128 it is "ip:2001:db8:1:1a0::7".
func IPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 1 || bits > 128 {
			return fmt.Errorf("IPv6Prefix(%d): want 1 to 128", bits)
		}
		c.v6bits = bits
		return nil
	}
}

// IPv4Prefix groups IPv4 clients by their first bits bits, 1 to 32 (any
// other value is an error); the default, 32, gives keys such as
// "ip:203.0.113.7". Under 24, the key of 203.0.113.7 is
// "ip:203.0.113.0/24".
func IPv4Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 1 || bits > 32 {
			return fmt.Errorf("IPv4Prefix(%d): want 1 to 32", bits)
		}
		c.v4bits = bits
		return nil
	}
}
