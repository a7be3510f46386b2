// Package fiberlimit plugs an httplimit.Flow into Fiber (v2).
//
// New returns a fiber.Handler running the Flow; build the Flow with
// httplimit.New; several limits on a request are layers of one Flow (all or
// nothing, one store call), not two middlewares:
//
//	flow, err := httplimit.New(store, []httplimit.Layer{
//		{Policy: perMinute}, // every request, by client address
//		{Policy: login, Methods: []string{"POST"}, Routes: []string{"/login"}}, // and a stricter limit here
//	})
//	app.Use(fiberlimit.New(flow))
//
// Key functions see the connection's peer as RemoteAddr (not c.IP(), which
// may come from a proxy header) and c.Route().Path as Route: mounted with
// Use, on the app or a group, it sees the Use prefix ("/", "/users"), so
// mount a limiter keyed per route on each route. Their Context is c.UserContext(), since fasthttp
// does not tell handlers that a client left: a request paced by a leaky
// bucket waits out its delay, at most httplimit.WithMaxDelay. Every string they get
// is a copy, safe to keep; Unwrap gives them the *fiber.Ctx, User a user
// ID stored with c.Locals.
package fiberlimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/userkey"
	"github.com/apigate/ratelimit/keyfuncs"
)

// New returns Fiber middleware running f. New panics when f is nil: like
// http.Handle given a nil handler, it is a wiring mistake, reported when
// the routes are built (httplimit.New reports every other one).
func New(f *httplimit.Flow) fiber.Handler {
	if f == nil {
		panic("fiberlimit.New: nil *httplimit.Flow")
	}
	routes := new(routeCache)
	return func(c *fiber.Ctx) error {
		var err error
		f.Serve(request{c}, response{c}, func(ctx context.Context) int {
			if ctx == c.UserContext() { // nothing to settle
				err = c.Next()
				return 0
			}
			prev := c.UserContext()
			c.SetUserContext(ctx)
			err = c.Next()
			c.SetUserContext(prev) // the chain's, for the middleware before this one
			status := statusOf(c, err)
			if status == fiber.StatusNotFound && routes.index(c.App()).unrouted(c) {
				c.Locals(unroutedLocal{}, true)
			}
			return status
		})
		return err
	}
}

// unroutedLocal is the Locals key marking a request no route served.
type unroutedLocal struct{}

// Unrouted reports whether no route served the request, which Fiber's
// Route cannot tell under Use (httplimit reads it for a reputation's
// 404s): see routeIndex.unrouted.
func (q request) Unrouted() bool { return q.c.Locals(unroutedLocal{}) != nil }

// statusOf is the status of a response whose handler returned err: the
// one written, or the one Fiber's error handler writes for err by
// default (a *fiber.Error's code, else 500).
func statusOf(c *fiber.Ctx, err error) int {
	if err == nil {
		return c.Response().StatusCode()
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fiber.StatusInternalServerError
}

// Unwrap returns the *fiber.Ctx behind r, for key, skip and cost functions
// that need Fiber's own data. ok is false when r does not come from this
// package. Strings read from it are valid only until the handler returns;
// a key function may still return one (c.Get, say), since the Limiter and
// the stores copy every key they keep.
func Unwrap(r keyfuncs.Request) (c *fiber.Ctx, ok bool) {
	q, ok := r.(request)
	return q.c, ok
}

// User returns a key function keying requests on the user ID that an
// earlier handler stored with c.Locals(key, id), Fiber's usual way (its
// auth middlewares do so): "user:" followed by the ID, as keyfuncs.User
// does. No value, or an empty one, gives an error wrapping
// keyfuncs.ErrNoKey (so that keyfuncs.FirstOf can fall back to another
// key). An ID may be a string, an integer or a fmt.Stringer (a UUID); a
// value of another type is reported as a misconfiguration. The key is a
// copy, safe to keep. A nil or empty key, or one of a type that is not
// comparable, is an error wrapping core.ErrInvalidOption.
func User(key any) (keyfuncs.Func, error) {
	if err := userkey.CheckKey("fiberlimit.User", key); err != nil {
		return nil, err
	}
	users := userkey.New(fmt.Sprintf("fiber locals key %q", fmt.Sprint(key)))
	return func(r keyfuncs.Request) (string, error) {
		c, ok := Unwrap(r)
		if !ok {
			return "", fmt.Errorf("fiberlimit.User: request not from fiberlimit")
		}
		return users.Value(c.Locals(key), true)
	}, nil
}

// request is Fiber's request as a keyfuncs.Request. Holding one pointer,
// it converts to an interface without allocating.
type request struct{ c *fiber.Ctx }

// RemoteAddr formats the connection's peer as net/http would.
func (q request) RemoteAddr() string {
	addr := q.c.Context().RemoteAddr()
	if a, ok := addr.(*net.TCPAddr); ok {
		ap := a.AddrPort()
		var buf [64]byte
		return string(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).AppendTo(buf[:0]))
	}
	return addr.String()
}

// PeerAddrPort is the connection's peer without formatting it, for the
// IP key function (a fast path of keyfuncs.ClientIP): ok for a TCP peer
// without zone, whose text RemoteAddr returns.
func (q request) PeerAddrPort() (netip.AddrPort, bool) {
	a, ok := q.c.Context().RemoteAddr().(*net.TCPAddr)
	if !ok || a.Zone != "" {
		return netip.AddrPort{}, false
	}
	ap := a.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.Addr().IsValid()
}

func (q request) Header(name string) string {
	return string(q.c.Request().Header.Peek(name)) // a copy
}

func (q request) HeaderValues(name string) []string {
	all := q.c.Request().Header.PeekAll(name)
	if len(all) == 0 {
		return nil
	}
	vals := make([]string, len(all))
	for i, v := range all {
		vals[i] = string(v) // a copy
	}
	return vals
}

// Method returns the method as a constant, or a copy of an unusual one.
func (q request) Method() string {
	switch m := q.c.Method(); m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodOptions:
		return fiber.MethodOptions
	default:
		return strings.Clone(m)
	}
}

func (q request) Route() string            { return q.c.Route().Path }
func (q request) Context() context.Context { return q.c.UserContext() }

// Path is the request's path, for the routes of httplimit layers: the
// bytes of the request's URI, valid only while the flow runs.
func (q request) Path() string { return q.c.Path() }

// response is Fiber's response as a httplimit.Response.
type response struct{ c *fiber.Ctx }

// Set sets the field key under its canonical name ("X-Ratelimit-Limit"),
// under which fasthttp's Peek, and so c.GetRespHeader, finds it; fasthttp
// copies both key and value.
func (w response) Set(key, value string) {
	w.setBytes(key, []byte(value))
}

// SetBytes is Set with the value in bytes, which fasthttp copies
// (a fast path of headers.Writer): the fields are set without allocating.
func (w response) SetBytes(key string, value []byte) { w.setBytes(key, value) }

// SetInt sets the field key to the decimal text of n, formatted on the
// stack, since fasthttp copies it (a fast path of headers.Writer).
func (w response) SetInt(key string, n int64) {
	var b [20]byte
	w.setBytes(key, strconv.AppendInt(b[:0], n, 10))
}

// SetIntPair sets the fields key1 and key2 to the decimal text of n,
// formatted once on the stack (a fast path of headers.Writer).
func (w response) SetIntPair(key1, key2 string, n int64) {
	var b [20]byte
	v := strconv.AppendInt(b[:0], n, 10)
	w.setBytes(key1, v)
	w.setBytes(key2, v)
}

// setBytes sets the field key to value, under key's canonical name: one
// precomputed for the fields the flow writes, fasthttp's normalizing of
// any other.
func (w response) setBytes(key string, value []byte) {
	h := &w.c.Response().Header
	if k := canonicalKey(key); k != "" {
		h.SetCanonical([]byte(k), value) // k is a constant's text: converted without a copy
		return
	}
	h.SetBytesV(key, value)
}

// canonicalKey returns the canonical name of a field the flow writes,
// given as the standards spell it, and "" for any other.
func canonicalKey(key string) string {
	switch key {
	case "X-RateLimit-Limit":
		return "X-Ratelimit-Limit"
	case "X-RateLimit-Remaining":
		return "X-Ratelimit-Remaining"
	case "X-RateLimit-Reset":
		return "X-Ratelimit-Reset"
	case "RateLimit-Limit":
		return "Ratelimit-Limit"
	case "RateLimit-Remaining":
		return "Ratelimit-Remaining"
	case "RateLimit-Reset":
		return "Ratelimit-Reset"
	case "RateLimit":
		return "Ratelimit"
	case "RateLimit-Policy":
		return "Ratelimit-Policy"
	case "Retry-After", "Cache-Control", "Content-Type":
		return key
	}
	return ""
}

func (w response) Write(status int, contentType string, body []byte) error {
	w.c.Set(fiber.HeaderContentType, contentType)
	return w.c.Status(status).Send(body)
}
