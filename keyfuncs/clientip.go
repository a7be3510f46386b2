package keyfuncs

import "net/netip"

// ClientIP finds a request's client address under one trust model, the
// one [IP] documents, and gives it in the two forms the HTTP flow needs:
// Addr, the address itself, which allow and deny lists are matched
// against, and Key, the rate-limit key that IP's key function returns.
// Building both from one ClientIP is what keeps them in step: a deny list
// matched against the socket peer while the limiter believes a trusted
// proxy's X-Forwarded-For would see only the proxy, and a list matched
// against a header the limiter does not trust would let any client write
// itself off the list. It is immutable and safe for concurrent use.
type ClientIP struct {
	r *ipResolver
}

// NewClientIP returns the ClientIP of the trust model opts describe, with
// the errors of [IP].
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

// Key is the key function of [IP] with the same options: "ip:" and the
// address, or its prefix for IPv6.
func (c *ClientIP) Key(r Request) (string, error) { return c.r.key(r) }
