package keyfuncs

import "fmt"

// maxRouteLen is the longest route pattern, in bytes, that Route accepts.
const maxRouteLen = 1024

// Route returns a key function keying requests on the matched route:
// "route:" followed by the method and the framework's route pattern,
// "route:GET /users/{id}". Combined with another key by [Compose], it
// gives per-endpoint limits.
//
// The key space stays as small as the route table, whatever clients
// send: a request that matched no route is keyed "route:GET <unmatched>"
// (never by its raw path), and a method other than GET, HEAD, POST, PUT,
// PATCH, DELETE, CONNECT, OPTIONS and TRACE is keyed as "OTHER". A route
// pattern longer than 1024 bytes gives an error wrapping [ErrNoKey].
func Route() Func {
	return func(r Request) (string, error) {
		pattern := r.Route()
		if pattern == "" {
			pattern = "<unmatched>"
		} else if len(pattern) > maxRouteLen {
			return "", fmt.Errorf("%w: route pattern longer than %d bytes", ErrNoKey, maxRouteLen)
		}
		return "route:" + method(r.Method()) + " " + pattern, nil
	}
}

// method returns m if it is a method of RFC 9110 or PATCH, else "OTHER".
func method(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE":
		return m
	}
	return "OTHER"
}
