package keyfuncs

import "net/netip"

// ClientIP finds a request's client address under one trust model and
// gives it in the two forms the HTTP flow needs: [ClientIP.Addr], which
// allow and deny lists are matched against, and [ClientIP.Key], the key
// function, so that lists and limiter never disagree about who the client
// is. Build it with [NewClientIP]; it is immutable and safe for
// concurrent use.
//
// With no option the client is the socket peer, Request.RemoteAddr, and no
// header is believed (X-Forwarded-For, Forwarded, X-Real-IP and the like
// can be sent by any client). [TrustedProxies], [UseForwarded] and
// [TrustedHeader] say which header to believe, and from which peers; when
// in doubt, the client is an address it cannot choose. Reading a header
// costs bounded work: at most 32 entries and 4 KiB. IPv4-mapped addresses
// count as IPv4, zones are dropped, and IPv6 clients are grouped by /56
// ([Prefixes]). docs/keys.md tells the trust model in full.
//
// A ClientIP that trusts no proxy and no header logs the first request
// that comes with X-Forwarded-For or Forwarded among its first 1,024,
// once, at slog.LevelWarn on slog.Default(): behind a proxy, every client
// would share the proxy's quota until TrustedProxies declares it (a proxy
// adds the header to every request, so it shows among the first). The
// header's value and the address are not logged.
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

// Key is the key function of c, a Func: "ip:" and the client's address
// ("ip:203.0.113.7") or, grouped by [Prefixes], its prefix
// ("ip:2001:db8:1:100::/56"). It is the HTTP flow's key when none is
// given. Its errors are Addr's.
func (c *ClientIP) Key(r Request) (string, error) { return c.r.key(r) }
