package keyfuncs

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync/atomic"

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

// ipResolver finds the client address of a request according to a trust
// model (see [ClientIP]) and turns it into a rate-limit key. The zero
// ipResolver trusts no proxy and uses the default prefixes. Its
// configuration is immutable once built; its key cache is safe for
// concurrent use.
type ipResolver struct {
	ipConfig
	keys keyCache // the keys of the last clients, for keyOf
	// checks counts the requests the forwarding check has looked at; at
	// forwardingChecks or more the check is over (see checkForwarding).
	checks atomic.Int64
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
			return nil, fmt.Errorf("%w: keyfuncs.NewClientIP: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return nil, fmt.Errorf("%w: keyfuncs.NewClientIP: %w", core.ErrInvalidOption, err)
		}
	}
	switch {
	case c.forwarded && len(c.proxies) == 0:
		return nil, fmt.Errorf("%w: keyfuncs.NewClientIP: UseForwarded requires TrustedProxies", core.ErrInvalidOption)
	case c.forwarded && c.header != "":
		return nil, fmt.Errorf("%w: keyfuncs.NewClientIP: UseForwarded and TrustedHeader exclude each other", core.ErrInvalidOption)
	}
	return &ipResolver{ipConfig: c}, nil
}

// clientIP returns the client's address: IPv4-mapped addresses folded to
// IPv4, without zone, not yet grouped by prefix. It fails, with an error
// wrapping ErrNoKey, only when it must fall back on the socket peer and
// RemoteAddr is not an address.
func (r *ipResolver) clientIP(req Request) (netip.Addr, error) {
	if len(r.proxies) == 0 {
		if r.header != "" {
			if a, ok := r.fromHeader(req); ok {
				return a, nil
			}
		} else if r.checks.Load() < forwardingChecks { // one atomic load a request, once over
			r.checkForwarding(req)
		}
		return peerAddr(req)
	}
	peer, err := peerAddr(req)
	if err != nil || !r.trusted(peer) {
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

// forwardingChecks is how many requests a resolver that trusts no proxy
// looks at for a forwarding header: a proxy or load balancer adds one to
// every request, so it shows among the first, and the check (two header
// lookups, about 900 instructions through net/http's canonical names) is
// then no longer paid by an API that has no proxy in front.
const forwardingChecks = 1024

// checkOver is the count that ends the forwarding check at once (a
// report), far above forwardingChecks whatever adds to it after.
const checkOver = 1 << 62

// checkForwarding reports, once per resolver, a request that came with
// X-Forwarded-For or Forwarded to a resolver that trusts no proxy and no
// header, among its first forwardingChecks requests: behind a proxy,
// every client would share the proxy's quota. The header's value and the
// peer's address are never logged.
func (r *ipResolver) checkForwarding(req Request) {
	if r.checks.Add(1) > forwardingChecks {
		return
	}
	name := headerXFF
	if req.Header(headerXFF) == "" {
		if req.Header(headerForwarded) == "" {
			return
		}
		name = headerForwarded
	}
	if r.checks.Swap(checkOver) <= forwardingChecks { // the first to end the check reports
		reportForwarding(req.Context(), name)
	}
}

// reportForwarding logs, at Warn on slog.Default(), that a request came
// with the forwarding header name while no proxy is trusted: see
// checkForwarding.
func reportForwarding(ctx context.Context, name string) {
	slog.Default().LogAttrs(ctx, slog.LevelWarn, msgForwarding, slog.String("header", name))
}

// msgForwarding is reportForwarding's message, which docs/monitoring.md
// quotes.
const msgForwarding = "keyfuncs: a request came with X-Forwarded-For or Forwarded, but the ClientIP trusts no proxy, " +
	"so its client is the socket peer: behind a proxy or load balancer, every client behind it shares one quota, the proxy's; " +
	"declare it with keyfuncs.TrustedProxies (and keyfuncs.UseForwarded for Forwarded) in keyfuncs.NewClientIP, " +
	"given to httplimit.WithClientIP; without a proxy, a client sent the header and nothing is to be done " +
	"(logged once per ClientIP)"

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
// trusted peer. Each entry, read from the right, is the address the hop to
// its right saw: trusted entries are skipped, and the first one outside
// the trusted prefixes is the client; the leftmost entry, which the client
// wrote, is never believed merely for being leftmost. When every entry is
// trusted, the leftmost trusted one is the client. An entry that is not an
// address, or one past maxHops or maxHeaderBytes, ends the walk at the
// last address known good, the trusted hop that reported it: a forged
// value can at worst put its sender in that proxy's bucket, never in one
// of its choice.
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
// fastPeer.
func peerAddr(req Request) (netip.Addr, error) {
	if p, ok := req.(fastPeer); ok {
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
