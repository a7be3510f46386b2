// Package echolimit plugs an httplimit.Flow into Echo (v4).
//
// New returns an echo.MiddlewareFunc running the Flow; build the Flow with
// httplimit.New. Mount it with e.Use (it then runs after routing, for
// every request, 404s included), on a group or on a route; several
// limits on a request are layers of one Flow (all or nothing, one store
// call), not two middlewares:
//
//	flow, err := httplimit.New(store, []httplimit.Layer{
//		{Policy: perMinute}, // every request, by client address
//		{Policy: login, Methods: []string{"POST"}, Routes: []string{"/login"}}, // and a stricter limit here
//	})
//	e.Use(echolimit.New(flow))
//
// Key functions see the socket peer as RemoteAddr (not Echo's RealIP,
// which trusts headers) and c.Path() as Route (never the raw path); Unwrap
// gives them the echo.Context, User a user ID stored with c.Set. A request
// that does not proceed is answered and the handler returns nil, leaving
// Echo's HTTPErrorHandler nothing to do.
package echolimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/userkey"
	"github.com/apigate/ratelimit/keyfuncs"
)

// New returns Echo middleware running f. New panics when f is nil: like
// http.Handle given a nil handler, it is a wiring mistake, reported when
// the routes are built (httplimit.New reports every other one).
func New(f *httplimit.Flow) echo.MiddlewareFunc {
	if f == nil {
		panic("echolimit.New: nil *httplimit.Flow")
	}
	chains, routes := new(chainCache), new(routeCache)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if h, ok := chains.get(next); ok {
			return h
		}
		h := handler(f, next, routes)
		chains.put(next, h)
		return h
	}
}

// handler is the handler that runs f, then next if the request proceeds.
func handler(f *httplimit.Flow, next echo.HandlerFunc, routes *routeCache) echo.HandlerFunc {
	return func(c echo.Context) error {
		q := requests.Get().(*request)
		q.c, q.routes = c, routes
		var err error
		f.Serve(q, response{c.Response()}, func(ctx context.Context) int {
			if ctx == c.Request().Context() { // nothing to settle
				err = next(c)
				return 0
			}
			c.SetRequest(c.Request().WithContext(ctx))
			err = next(c)
			return statusOf(c.Response(), err)
		})
		q.c, q.routes = nil, nil
		requests.Put(q)
		return err
	}
}

// statusOf is the status of a response whose handler returned err: the
// one written, or the one Echo's error handler will write for err (an
// *echo.HTTPError's code, else 500).
func statusOf(r *echo.Response, err error) int {
	if err == nil || r.Committed {
		return r.Status
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}

// chainCache remembers the handlers that one New's middleware built for
// the last next handlers it was given. Echo applies the middleware of
// e.Use to the route's handler on every request, and a new handler would
// cost an allocation each time: for the same next (the same func value,
// the same closure), the handler built before is the same handler. Once
// it has missed maxChainMisses times (a middleware after this one, or in
// e.Pre, hands it a new closure on every request; or too many routes take
// turns in its slots), it stops looking. It is safe for concurrent use.
type chainCache struct {
	slots  [chainSlots]atomic.Pointer[chain]
	misses atomic.Int64
}

// chain is one next handler and the handler built for it.
type chain struct {
	next, h echo.HandlerFunc
}

const (
	chainSlots     = 8
	maxChainMisses = 1024
)

// funcPointer is the identity of fn: the address of its closure. Two func
// values with the same address are the same code over the same captured
// variables. A chain holds its next, so that the address cannot be reused
// by another closure while it is cached.
//
// unsafe: Go has no safe identity of a closure (reflect's Pointer is its
// code's, the same for every closure of one literal), and without the
// cache each request builds its handler: 1 against 2 allocs/op and 659
// against 691 CPU-ns/op (go test -run '^$' -bench 'BenchmarkEcho$/Limiter$'
// ./adapters/echo, median of 6 alternating runs, 2026-12-07).
func funcPointer(fn echo.HandlerFunc) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&fn))
}

// slot returns the slot of the closure at p.
func (cc *chainCache) slot(p unsafe.Pointer) *atomic.Pointer[chain] {
	return &cc.slots[(uint64(uintptr(p))>>4*0x9e3779b97f4a7c15)>>61]
}

// get returns the handler built for next, if cached.
func (cc *chainCache) get(next echo.HandlerFunc) (echo.HandlerFunc, bool) {
	p := funcPointer(next)
	if p == nil {
		return nil, false
	}
	if c := cc.slot(p).Load(); c != nil && funcPointer(c.next) == p {
		return c.h, true
	}
	return nil, false
}

// put caches h, the handler built for next, until maxChainMisses.
func (cc *chainCache) put(next, h echo.HandlerFunc) {
	p := funcPointer(next)
	if p == nil || cc.misses.Load() >= maxChainMisses {
		return
	}
	cc.misses.Add(1)
	cc.slot(p).Store(&chain{next: next, h: h})
}

// Unwrap returns the echo.Context behind r, for key, skip and cost
// functions that need Echo's own data. ok is false when r does not come
// from this package.
func Unwrap(r keyfuncs.Request) (c echo.Context, ok bool) {
	q, ok := r.(*request)
	if !ok || q.c == nil {
		return nil, false
	}
	return q.c, true
}

// User returns a key function keying requests on the user ID that an
// earlier middleware stored with c.Set(key, id), Echo's usual way:
// "user:" followed by the ID, as keyfuncs.User does. No value, or an empty
// one, gives an error wrapping keyfuncs.ErrNoKey (so that keyfuncs.FirstOf
// can fall back to another key). An ID may be a string, an integer or a
// fmt.Stringer (a UUID); a value of another type is reported as a
// misconfiguration. Echo's c.Set takes string keys: a key that is not a
// non-empty string is an error wrapping core.ErrInvalidOption.
// Echo's c.Set values are not in the request's context.Context, so this
// function reads them from the echo.Context itself (see Unwrap).
func User(key any) (keyfuncs.Func, error) {
	if err := userkey.CheckKey("echolimit.User", key); err != nil {
		return nil, err
	}
	name, ok := key.(string)
	if !ok {
		return nil, fmt.Errorf("%w: echolimit.User: key of type %T: echo.Context.Set takes a string", core.ErrInvalidOption, key)
	}
	users := userkey.New(fmt.Sprintf("echo context key %q", name))
	return func(r keyfuncs.Request) (string, error) {
		c, ok := Unwrap(r)
		if !ok {
			return "", fmt.Errorf("echolimit.User: request not from echolimit")
		}
		return users.Value(c.Get(name), true)
	}, nil
}

// request is Echo's request as a keyfuncs.Request. The middleware takes
// them from requests, a pool: a struct holding an interface does not fit
// in one, and would cost an allocation a request. It is valid only while
// the flow runs; Unwrap of one kept longer reports false.
type request struct {
	c      echo.Context
	routes *routeCache
}

var requests = sync.Pool{New: func() any { return new(request) }}

func (q *request) RemoteAddr() string                { return q.c.Request().RemoteAddr }
func (q *request) Header(name string) string         { return q.c.Request().Header.Get(name) }
func (q *request) HeaderValues(name string) []string { return q.c.Request().Header.Values(name) }
func (q *request) Method() string                    { return q.c.Request().Method }
func (q *request) Route() string                     { return q.c.Path() }

// Unrouted reports whether no route served the request, by Echo's router:
// it matched none (c.Path() is empty), or only a route registered with
// e.RouteNotFound (a group's middleware registers some), whose path is no
// route of the request's method (httplimit reads it for a reputation's
// 404s). The flow asks only of a 404.
func (q *request) Unrouted() bool {
	path := q.c.Path()
	if path == "" {
		return true
	}
	r := q.c.Request()
	e := q.c.Echo()
	router := e.Router()
	if hosts := e.Routers(); len(hosts) > 0 { // the router Echo chose, as its findRouter does
		if hr, ok := hosts[r.Host]; ok {
			router = hr
		}
	}
	return q.routes.unrouted(router, r.Method, path)
}

func (q *request) Context() context.Context { return q.c.Request().Context() }

// Path is the request's path, for the routes of httplimit layers.
func (q *request) Path() string { return q.c.Request().URL.Path }

// response is Echo's response as a httplimit.Response. Holding one
// pointer, it converts to an interface without allocating.
type response struct{ r *echo.Response }

func (w response) Set(key, value string) { w.r.Header().Set(key, value) }

// HeaderMap is the response's header map, in which the flow sets the
// rate-limit fields under their canonical names.
func (w response) HeaderMap() http.Header { return w.r.Header() }

func (w response) Write(status int, contentType string, body []byte) error {
	w.r.Header().Set(echo.HeaderContentType, contentType)
	w.r.WriteHeader(status)
	_, err := w.r.Write(body)
	return err
}
