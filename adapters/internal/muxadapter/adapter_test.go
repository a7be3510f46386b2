// Package muxadapter_test is a fifth adapter, written from httplimit's
// documentation alone (keyfuncs.Request, httplimit.Response,
// Flow.Serve): net/http's http.Handler wrapped directly, its routes a
// ServeMux's patterns. It passes the adapter suite the four adapters pass
// (adapterstest), which proves the contract an adapter of another
// framework implements.
package muxadapter_test

import (
	"context"
	"net/http"
	"strings"

	"github.com/apigate/ratelimit/httplimit"
)

// limit returns next limited by flow. The route the flow sees is the
// pattern of a ServeMux (without its method): of next, when next is one
// (or another limit's, whose next is), asked before it routes; else the
// r.Pattern a ServeMux wrote on the request, when limit wraps one of its
// handlers.
func limit(flow *httplimit.Flow, next http.Handler) http.Handler {
	mux, _ := next.(*http.ServeMux)
	if l, ok := next.(*limited); ok {
		mux = l.mux
	}
	return &limited{flow: flow, next: next, mux: mux}
}

type limited struct {
	flow *httplimit.Flow
	next http.Handler
	mux  *http.ServeMux // nil when next is not one
}

func (l *limited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pattern := r.Pattern
	if l.mux != nil {
		_, pattern = l.mux.Handler(r)
	}
	l.flow.Serve(&request{r: r, pattern: pattern}, response{w}, func(ctx context.Context) int {
		if ctx == r.Context() { // nothing to settle or score: the chain as it is
			l.next.ServeHTTP(w, r)
			return 0
		}
		sw := &statusWriter{ResponseWriter: w}
		l.next.ServeHTTP(sw, r.WithContext(ctx))
		return sw.status
	})
}

// request is a net/http request as a keyfuncs.Request.
type request struct {
	r       *http.Request
	pattern string // the ServeMux pattern that serves r, "" if none
}

func (q *request) RemoteAddr() string                { return q.r.RemoteAddr }
func (q *request) Header(name string) string         { return q.r.Header.Get(name) }
func (q *request) HeaderValues(name string) []string { return q.r.Header.Values(name) }
func (q *request) Method() string                    { return q.r.Method }
func (q *request) Path() string                      { return q.r.URL.Path }
func (q *request) Context() context.Context          { return q.r.Context() }

// Route is the pattern without its method: "GET /users/{id}" is
// "/users/{id}".
func (q *request) Route() string {
	p := q.pattern
	if i := strings.IndexByte(p, ' '); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	return p
}

// Unrouted reports whether no pattern of the ServeMux serves the request.
func (q *request) Unrouted() bool { return q.pattern == "" }

// response is a net/http response as an httplimit.Response; HeaderMap
// lets the flow set the rate-limit fields in the header map directly.
type response struct{ w http.ResponseWriter }

func (w response) Set(key, value string)  { w.w.Header().Set(key, value) }
func (w response) HeaderMap() http.Header { return w.w.Header() }

func (w response) Write(status int, contentType string, body []byte) error {
	w.w.Header().Set("Content-Type", contentType)
	w.w.WriteHeader(status)
	_, err := w.w.Write(body)
	return err
}

// statusWriter remembers the first final status a handler writes, which
// Serve's next returns for the layers that settle.
type statusWriter struct {
	http.ResponseWriter
	status int
}

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
