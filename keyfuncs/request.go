// Package keyfuncs answers "who is the client?" for the rate limiter, the
// same way in every framework: by IP (trusting proxy headers only from the
// proxies you name, see [ClientIP]), by API key (hashed), by user ID, by route
// pattern, or by a composition of these. Adapters present each framework's
// request as a [Request]; key functions never see a framework type.
//
// Every constructor that takes input returns (Func, error), the error
// wrapping core.ErrInvalidOption when the input is bad; [Route], which takes
// none, returns a Func; [NewClientIP] returns a ClientIP, whose Key method
// is the IP key function.
//
// Bounds on what a client sends, beyond which a key function finds no key
// (an error wrapping [ErrNoKey]): an API key of at most 4096 bytes, a user
// ID of at most 512, a route pattern of at most 1024.
package keyfuncs

import (
	"context"
	"net/netip"

	"github.com/apigate/ratelimit/internal/rules/userkey"
)

// Request is the framework-neutral view of an HTTP request that key
// functions read. Every adapter implements it for its framework.
type Request interface {
	// RemoteAddr is the socket peer's address, "ip:port" or a bare IP, as
	// net/http's Request.RemoteAddr. It is never taken from a header.
	RemoteAddr() string
	// Header returns the first value of the named request header, "" if none.
	Header(name string) string
	// HeaderValues returns every value of the named request header, in the
	// order received (a header repeated on several lines gives several).
	HeaderValues(name string) []string
	// Method is the HTTP method.
	Method() string
	// Route is the framework's pattern of the matched route, such as
	// "/users/:id" or "/users/{id}"; "" when no route matched (or the
	// adapter cannot know it).
	Route() string
	// Path is the request's URL path as received, not yet cleaned or
	// decoded ("/users/7"), which the HTTP flow matches layer routes
	// against; "" when the adapter cannot know it (the flow then matches
	// the Route pattern). Fiber's is valid only while the request is
	// handled.
	Path() string
	// Context is the request's context (for values such as a user ID).
	Context() context.Context
	// Unrouted reports whether no route of the application serves the
	// request: Route() == "" where the framework's Route tells, or its
	// router's answer where a not-found handler has a pattern of its own
	// (Echo's RouteNotFound; Fiber's Route under Use, which is the
	// middleware's). The HTTP flow asks it, for a reputation's signals,
	// only once the handler has answered 404.
	Unrouted() bool
}

// fastPeer is a Request that holds its socket peer as a
// netip.AddrPort, so that ClientIP need not parse RemoteAddr, nor the
// adapter format it. It is matched by method set: a Request of any
// package that has the method qualifies (Fiber's does, and its tests
// assert it). PeerAddrPort reports ok only for an address without zone
// whose text, with its port, RemoteAddr returns; ClientIP reads
// RemoteAddr otherwise.
type fastPeer interface {
	Request
	PeerAddrPort() (ap netip.AddrPort, ok bool)
}

// Func extracts the rate-limit key of a request. It never returns an empty
// key with a nil error: a Func that cannot identify the client returns an
// error wrapping ErrNoKey.
type Func func(r Request) (string, error)

// ErrNoKey reports a request in which a key function found nothing to key
// on: no API key header, no user in the context, no usable peer address.
// [FirstOf] moves on to its next function on it; the adapters answer it
// with 400. It never wraps core.ErrInvalidOption, nor the reverse.
var ErrNoKey = userkey.ErrNoKey
