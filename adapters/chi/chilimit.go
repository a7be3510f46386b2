// Package chilimit plugs an httplimit.Flow into chi and any net/http
// router.
//
// New returns the usual func(http.Handler) http.Handler running the Flow;
// build the Flow with httplimit.New, several limits on a request as its
// layers (all or nothing, one store call), not as two middlewares:
//
//	flow, err := httplimit.New(store, []httplimit.Layer{
//		{Policy: perMinute}, // every request, by client address
//		{Policy: login, Methods: []string{"POST"}, Routes: []string{"/login"}}, // and a stricter limit here
//	})
//	r := chi.NewRouter()
//	r.Use(chilimit.New(flow))
//
//	http.ListenAndServe(addr, chilimit.New(flow)(mux)) // plain net/http
//
// Key functions see r.RemoteAddr, the socket peer, as RemoteAddr: chi's
// middleware.RealIP, which overwrites it from a header any client can
// send, must not run before a limiter keyed on IP. Route is the pattern of
// the route the request matches, wherever the limiter is mounted (chi's
// RoutePattern, or r.Pattern for a ServeMux route), "" when none does.
// Unwrap gives them the *http.Request; keyfuncs.User keys a user ID an
// earlier middleware stored in its context.
package chilimit

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// New returns net/http middleware running f: a request that does not
// proceed has been answered, and next is not called. New panics when f is
// nil: like http.Handle given a nil handler, it is a wiring mistake,
// reported when the routes are built (httplimit.New reports every other
// one).
func New(f *httplimit.Flow) func(http.Handler) http.Handler {
	if f == nil {
		panic("chilimit.New: nil *httplimit.Flow")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := requests.Get().(*request)
			q.r = r
			rw := responses.Get().(*response)
			rw.w = w
			f.Serve(q, rw, func(ctx context.Context) int {
				if ctx == r.Context() { // nothing to settle: the handler as it is
					next.ServeHTTP(w, r)
					return 0
				}
				sw := statusWriters.Get().(*statusWriter)
				sw.ResponseWriter, sw.status = w, 0
				q.ran = r.WithContext(ctx)
				next.ServeHTTP(sw, q.ran)
				status := sw.status
				sw.ResponseWriter = nil
				statusWriters.Put(sw) // valid only until the handler returns, as net/http's own
				return status
			})
			q.r, q.ran = nil, nil
			requests.Put(q)
			rw.w = nil
			responses.Put(rw)
		})
	}
}

// Unwrap returns the *http.Request behind r, for key, skip and cost
// functions that need more of it. ok is false when r does not come from
// this package.
func Unwrap(r keyfuncs.Request) (req *http.Request, ok bool) {
	q, ok := r.(*request)
	if !ok || q.r == nil {
		return nil, false
	}
	return q.r, true
}

// request is a net/http request as a keyfuncs.Request: r, and ran, the
// copy the handler ran with when the flow gave it a context of its own,
// on which a ServeMux writes the pattern it matched. The middleware takes
// them from requests, a pool: a struct of two pointers does not fit in an
// interface, and would cost an allocation a request. It is valid only
// while the flow runs; Unwrap of one kept longer reports false.
type request struct{ r, ran *http.Request }

var requests = sync.Pool{New: func() any { return new(request) }}

func (q *request) RemoteAddr() string                { return q.r.RemoteAddr }
func (q *request) Header(name string) string         { return q.r.Header.Get(name) }
func (q *request) HeaderValues(name string) []string { return q.r.Header.Values(name) }
func (q *request) Method() string                    { return q.r.Method }
func (q *request) Context() context.Context          { return q.r.Context() }

// Path is the request's path, for the routes of httplimit layers.
func (q *request) Path() string { return q.r.URL.Path }

// Route returns the pattern of the route the request matches:
//
//   - chi, routing done (middleware given to With, or to Use inside Route or
//     Group of an already-matched subrouter): chi's RoutePattern(),
//     "/users/{id}".
//   - chi, routing not done yet (r.Use on a router, which runs before the
//     router matches; or the pattern so far ends at a mounted subrouter's
//     "/*"): the pattern is looked up in the top router with Routes.Find,
//     the same tree walk the router is about to do. A request that matches
//     nothing gets "".
//   - Plain net/http: r.Pattern (Go 1.22+ ServeMux), which is set only for
//     a handler inside the mux; once the handler has run, the pattern the
//     mux wrote on the request it was given (a copy when the flow gave
//     the handler a context of its own).
//
// keyfuncs.Route keys "" as one "unmatched" bucket, never the raw path.
func (q *request) Route() string {
	r := q.r
	if q.ran != nil { // the handler has run, on a copy: the mux's pattern is there
		r = q.ran
	}
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return r.Pattern
	}
	n := len(rctx.RoutePatterns)
	if n > 0 && !strings.HasSuffix(rctx.RoutePatterns[n-1], "/*") {
		return rctx.RoutePattern()
	}
	if rctx.Routes == nil {
		return r.Pattern
	}
	// rctx.Routes is the top router. Before it routes, rctx.RoutePath is
	// the path it will route on when a middleware (StripSlashes) set one;
	// inside a subrouter, RoutePath is relative to it, so the URL is used.
	path := ""
	if n == 0 {
		path = rctx.RoutePath
	}
	if path == "" {
		path = r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		if path == "" {
			path = "/"
		}
	}
	return rctx.Routes.Find(chi.NewRouteContext(), r.Method, path)
}

// Unrouted reports whether no route serves the request: its Route is "".
func (q *request) Unrouted() bool { return q.Route() == "" }

// response is a net/http response as a httplimit.Response. The
// middleware takes them from responses, a pool: a struct holding an
// interface does not fit in one, and would cost an allocation a request.
type response struct{ w http.ResponseWriter }

var responses = sync.Pool{New: func() any { return new(response) }}

func (w *response) Set(key, value string) { w.w.Header().Set(key, value) }

// HeaderMap is the response's header map, in which the flow sets the
// rate-limit fields under their canonical names.
func (w *response) HeaderMap() http.Header { return w.w.Header() }

// statusWriter is the http.ResponseWriter of a handler whose layers
// settle: it remembers the first final status written (200 when the
// handler writes a body first). http.ResponseController reaches the
// writer it wraps through Unwrap; Flush and Hijack are passed on for the
// handlers that assert them.
type statusWriter struct {
	http.ResponseWriter
	status int
}

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap returns the writer s wraps, for http.ResponseController.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush sends what is buffered, if the writer s wraps can.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Hijack hands over the connection, if the writer s wraps can.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

func (w *response) Write(status int, contentType string, body []byte) error {
	w.w.Header().Set("Content-Type", contentType)
	w.w.WriteHeader(status)
	_, err := w.w.Write(body)
	return err
}
