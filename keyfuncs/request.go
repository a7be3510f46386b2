// Package keyfuncs answers "who is the client?" for the rate limiter, the
// same way in every framework: by IP (trusting proxy headers only from the
// proxies you name, see [IP]), by API key (hashed), by user ID, by route
// pattern, or by a composition of these. Adapters present each framework's
// request as a [Request]; key functions never see a framework type.
//
// Every constructor that takes input returns (Func, error), the error
// wrapping core.ErrInvalidOption when the input is bad; [Route], which takes
// none, returns a Func.
package keyfuncs

import (
	"context"
	"net/netip"

	"github.com/apigate/ratelimit/internal/userkey"
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
	// Query returns the first value of the named URL query parameter.
	Query(name string) string
	// Method is the HTTP method.
	Method() string
	// Route is the framework's pattern of the matched route, such as
	// "/users/:id" or "/users/{id}"; "" when no route matched (or the
	// adapter cannot know it).
	Route() string
	// Context is the request's context (for values such as a user ID).
	Context() context.Context
}

// PeerRequest is a Request that holds its socket peer as a
// netip.AddrPort, so that the IP key functions need not parse RemoteAddr,
// nor the adapter format it (Fiber's does). PeerAddrPort reports ok only
// for an address without zone whose text, with its port, RemoteAddr
// returns; the key functions read RemoteAddr otherwise.
type PeerRequest interface {
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
