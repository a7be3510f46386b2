package keyfuncs

import "net/netip"

// ClientIP finds a request's client address under one trust model and
// gives it in the two forms the HTTP flow needs: Addr, the address itself,
// which allow and deny lists are matched against, and Key, the key
// function keying requests on it. Building both from one ClientIP is what
// keeps them in step: a deny list matched against the socket peer while
// the limiter believes a trusted proxy's X-Forwarded-For would see only
// the proxy, and a list matched against a header the limiter does not
// trust would let any client write itself off the list. It is immutable
// and safe for concurrent use; build it with NewClientIP.
//
// Key keys a request "ip:" followed by the address ("ip:203.0.113.7") or,
// for IPv6, by its /56 prefix ("ip:2001:db8:1:100::/56"). Which address
// is the client's depends on whom you trust, and the answer fails closed:
// when in doubt, it is an address the client cannot choose.
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
// default, since one subscriber usually holds a whole /56 or /64 and
// could otherwise rotate through 2^72 keys; IPv4 clients are keyed by
// their full address unless [Prefixes] says otherwise.
//
// Hostile headers cost bounded work: the walk reads at most 32 entries
// and 4 KiB, starting from the right, and a chain longer than that ends
// the walk as a bad entry does. Addr and Key fail, with an error wrapping
// [ErrNoKey], only when they must fall back on the socket peer and
// RemoteAddr is not an address.
type ClientIP struct {
	r *ipResolver
}

// NewClientIP returns the ClientIP of the trust model opts describe; no
// option is the socket peer, IPv6 grouped by /56. A bad or nil option,
// [UseForwarded] without [TrustedProxies], or UseForwarded with
// [TrustedHeader] is an error wrapping core.ErrInvalidOption.
func NewClientIP(opts ...IPOption) (*ClientIP, error) {
	r, err := newIPResolver(opts...)
	if err != nil {
		return nil, err
	}
	return &ClientIP{r: r}, nil
}

// Addr returns the client's address: an IPv4-mapped IPv6 address folded to
// IPv4, without zone, and not grouped by prefix (a list entry for one IPv6
// address matches that address only). It fails, with an error wrapping
// [ErrNoKey], only when it must fall back on the socket peer and
// RemoteAddr is not an address.
func (c *ClientIP) Addr(r Request) (netip.Addr, error) { return c.r.clientIP(r) }

// Key is the key function of c, a Func: "ip:" and the client's address,
// or its prefix (see [ClientIP]). It is the HTTP flow's key when none is
// given.
func (c *ClientIP) Key(r Request) (string, error) { return c.r.key(r) }
