package keyfuncs

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/apigate/ratelimit/core"
)

// Limits on hostile input. A forwarding chain is read from the right, so
// the entries that trusted proxies appended are always within reach.
const (
	maxHops        = 32   // X-Forwarded-For / Forwarded entries examined
	maxHeaderBytes = 4096 // bytes of those headers examined
	maxNodeLen     = 128  // length of one address, port and zone included
)

// Header names, in canonical form.
const (
	headerXFF       = "X-Forwarded-For"
	headerForwarded = "Forwarded"
)

// IP returns a key function keying requests on the client's IP address:
// "ip:" followed by the address ("ip:203.0.113.7") or, for IPv6, by its
// /56 prefix ("ip:2001:db8:1:100::/56"). Which address is the client's
// depends on whom you trust, and the answer fails closed: when in doubt,
// the key is an address the client cannot choose.
//
//   - Default (no option): the socket peer, Request.RemoteAddr, is the
//     client. No header is read: X-Forwarded-For, Forwarded, X-Real-IP,
//     True-Client-IP, CF-Connecting-IP and the like are ignored, because
//     any client can send them. Use this when the server faces the
//     internet directly.
//
//   - [TrustedProxies]: the listed CIDRs are your reverse proxies. A peer
//     outside them is the client and its headers are ignored. A peer
//     inside them is a proxy: X-Forwarded-For (or, with [UseForwarded],
//     RFC 7239 Forwarded) is walked from the RIGHT, each entry being the
//     address the hop to its right saw; entries inside the trusted CIDRs
//     are skipped and the first one outside them is the client. The
//     leftmost entry, which the client wrote itself, is never believed
//     merely for being leftmost. If every entry is trusted, the leftmost
//     trusted one is the client. An entry that is not an IP address
//     ("unknown", an obfuscated identifier, garbage) ends the walk: the
//     client is then the last address known good, the trusted hop that
//     reported the bad entry, so a forged value can at worst put its
//     sender in that proxy's bucket, never in a bucket of its choice.
//
//   - [TrustedHeader]: one header, such as CF-Connecting-IP, X-Real-IP or
//     Fly-Client-IP, that your CDN or load balancer OVERWRITES on every
//     request, holds the client's address. Combined with [TrustedProxies]
//     it is read only when the peer is one of the proxies. Without
//     TrustedProxies it is read from every peer: you assert that nothing
//     but that proxy can reach the server (firewall, security group,
//     private network). If the header is missing or is not a single IP
//     address, the peer is the client. Note that True-Client-IP,
//     Fastly-Client-IP and X-Azure-ClientIP are passed through from the
//     client by default in the products that set them.
//
// Every address, whether from the socket or from a header, is normalised
// before it is compared or keyed: an IPv4-mapped IPv6 address
// (::ffff:203.0.113.7) becomes IPv4, so it shares a bucket with
// 203.0.113.7 and cannot alias a trusted prefix, and an IPv6 zone
// ("%eth0") is dropped. IPv6 clients are grouped by prefix, /56 by
// default ([IPv6Prefix]), since one subscriber usually holds a whole /56
// or /64 and could otherwise rotate through 2^72 keys; IPv4 clients are
// keyed by their full address unless [IPv4Prefix] says otherwise.
//
// Hostile headers cost bounded work: the walk reads at most 32 entries
// and 4 KiB, starting from the right, and a chain longer than that ends
// the walk as a bad entry does. The key function fails, with an error
// wrapping [ErrNoKey], only when it must fall back on the socket peer and
// RemoteAddr is not an address. A bad or nil option, [UseForwarded]
// without [TrustedProxies], or UseForwarded with [TrustedHeader] is an
// error. The key function is safe for concurrent use.
func IP(opts ...IPOption) (Func, error) {
	r, err := newIPResolver(opts...)
	if err != nil {
		return nil, err
	}
	return r.key, nil
}

// ipResolver finds the client address of a request according to a trust
// model (see [IP]) and turns it into a rate-limit key. The zero
// ipResolver trusts no proxy and uses the default prefixes. Its
// configuration is immutable once built; its key cache is safe for
// concurrent use.
type ipResolver struct {
	ipConfig
	keys keyCache // the keys of the last clients, for keyOf
}

// ipConfig is what IPOptions set.
type ipConfig struct {
	proxies   []netip.Prefix // trusted peers; empty: headers are never walked
	forwarded bool           // walk Forwarded, not X-Forwarded-For
	header    string         // canonical TrustedHeader name, "" if none
	v4bits    int            // 0: defaultIPv4Prefix
	v6bits    int            // 0: defaultIPv6Prefix
}

// newIPResolver returns the resolver configured by opts, or an error
// wrapping core.ErrInvalidOption.
func newIPResolver(opts ...IPOption) (*ipResolver, error) {
	var c ipConfig
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: keyfuncs.IP: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return nil, fmt.Errorf("%w: keyfuncs.IP: %w", core.ErrInvalidOption, err)
		}
	}
	switch {
	case c.forwarded && len(c.proxies) == 0:
		return nil, fmt.Errorf("%w: keyfuncs.IP: UseForwarded requires TrustedProxies", core.ErrInvalidOption)
	case c.forwarded && c.header != "":
		return nil, fmt.Errorf("%w: keyfuncs.IP: UseForwarded and TrustedHeader exclude each other", core.ErrInvalidOption)
	}
	return &ipResolver{ipConfig: c}, nil
}

// clientIP returns the client's address: IPv4-mapped addresses folded to
// IPv4, without zone, not yet grouped by prefix. It fails, with an error
// wrapping ErrNoKey, only when it must fall back on the socket peer and
// RemoteAddr is not an address.
func (r *ipResolver) clientIP(req Request) (netip.Addr, error) {
	if r.header != "" && len(r.proxies) == 0 {
		if a, ok := r.fromHeader(req); ok {
			return a, nil
		}
		return peerAddr(req)
	}
	peer, err := peerAddr(req)
	if err != nil || len(r.proxies) == 0 || !r.trusted(peer) {
		return peer, err
	}
	if r.header != "" {
		if a, ok := r.fromHeader(req); ok {
			return a, nil
		}
		return peer, nil
	}
	name := headerXFF
	if r.forwarded {
		name = headerForwarded
	}
	return r.walk(req.HeaderValues(name), peer), nil
}

// key returns the rate-limit key of the client address: "ip:" followed by
// the address ("ip:203.0.113.7") or, when grouped by a shorter prefix, by
// the masked prefix ("ip:2001:db8:1:100::/56"). Errors are those of
// clientIP.
func (r *ipResolver) key(req Request) (string, error) {
	a, err := r.clientIP(req)
	if err != nil {
		return "", err
	}
	return r.keyOf(a), nil
}

// format returns the key of a (normalised) client address. keyOf is the
// same, cached.
func (r *ipResolver) format(a netip.Addr) string {
	var buf [64]byte
	return string(r.appendKey(buf[:0], a))
}

// appendKey appends the key of a (normalised) client address to b.
func (r *ipResolver) appendKey(b []byte, a netip.Addr) []byte {
	bits, full := r.v4bits, 32
	if bits == 0 {
		bits = defaultIPv4Prefix
	}
	if a.Is6() {
		bits, full = r.v6bits, 128
		if bits == 0 {
			bits = defaultIPv6Prefix
		}
	}
	b = append(b, "ip:"...)
	if bits >= full {
		return a.AppendTo(b)
	}
	p, _ := a.Prefix(bits) // bits is in range and a has no zone
	b = p.Addr().AppendTo(b)
	b = append(b, '/')
	return strconv.AppendInt(b, int64(bits), 10)
}

// trusted reports whether a is one of the trusted proxies.
func (r *ipResolver) trusted(a netip.Addr) bool {
	for _, p := range r.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fromHeader reads the TrustedHeader: its last line, a single address.
func (r *ipResolver) fromHeader(req Request) (netip.Addr, bool) {
	vals := req.HeaderValues(r.header)
	if len(vals) == 0 {
		return netip.Addr{}, false
	}
	return parseNode(trimOWS(vals[len(vals)-1]))
}

// walk finds the client in a forwarding chain whose nearest hop is the
// trusted peer; see the package documentation.
func (r *ipResolver) walk(lines []string, peer netip.Addr) netip.Addr {
	last := peer // the last address known good
	s := hopScanner{lines: lines, budget: maxHeaderBytes, forwarded: r.forwarded}
	for range maxHops {
		node, st := s.next()
		if st != hopNode { // exhausted (every hop trusted), or bad
			return last
		}
		a, ok := parseNode(node)
		if !ok {
			return last
		}
		if !r.trusted(a) {
			return a
		}
		last = a
	}
	return last
}

// peerAddr parses the socket peer's address, or takes it from a
// PeerRequest.
func peerAddr(req Request) (netip.Addr, error) {
	if p, ok := req.(PeerRequest); ok {
		if ap, ok := p.PeerAddrPort(); ok {
			if a := ap.Addr().Unmap(); a.IsValid() && a.Zone() == "" {
				return a, nil
			}
		}
	}
	ra := req.RemoteAddr()
	if a, ok := parseNode(ra); ok {
		return a, nil
	}
	if len(ra) > maxNodeLen {
		ra = ra[:maxNodeLen] + "..."
	}
	return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q is not an IP address", ErrNoKey, ra)
}
