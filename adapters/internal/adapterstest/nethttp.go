package adapterstest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// ServeHTTP sends req to h as net/http would, from the peer req.RemoteAddr
// (which must be set), and returns what h answered: what an
// httptest.ResponseRecorder holds, Header the recorder's. It is App.Do for
// every framework whose app is an http.Handler (gin, echo, chi).
func ServeHTTP(h http.Handler, req Request) Response {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, NewRequest(req))
	return Response{Status: w.Code, Header: w.Header(), Body: w.Body.String()}
}

// NewRequest returns req as an incoming server request, as ServeHTTP
// sends it: from the peer req.RemoteAddr, with req.Context when set.
func NewRequest(req Request) *http.Request {
	r := httptest.NewRequest(req.Method, req.Path, nil)
	r.RemoteAddr = req.RemoteAddr
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	if req.Context != nil {
		r = r.WithContext(req.Context)
	}
	return r
}

// HTTPApp returns h as an App whose Do is ServeHTTP.
func HTTPApp(h http.Handler) App { return httpApp{h} }

type httpApp struct{ h http.Handler }

func (a httpApp) Do(_ testing.TB, req Request) Response { return ServeHTTP(a.h, req) }

// HTTPHarness is the part of a Harness and a SocketHarness that is the
// same for every framework whose app is an http.Handler (chi, Echo, Gin, a
// ServeMux): Build and Serve the app H's Handler returns, and
// CancelsOnDisconnect (net/http ends a request's context when its client
// leaves). A harness embeds it with itself as H, whose zero value builds
// the apps:
//
//	type harness struct{ adapterstest.HTTPHarness[harness] }
//
//	func (harness) Handler(spec *adapterstest.Spec) http.Handler { ... }
type HTTPHarness[H interface{ Handler(spec *Spec) http.Handler }] struct{}

// Build returns the app of spec, served by ServeHTTP.
func (HTTPHarness[H]) Build(_ testing.TB, spec *Spec) App {
	var h H
	return HTTPApp(h.Handler(spec))
}

// Serve serves the app of spec on a loopback socket (ListenHTTP).
func (HTTPHarness[H]) Serve(t testing.TB, spec *Spec) string {
	var h H
	return ListenHTTP(t, h.Handler(spec))
}

// CancelsOnDisconnect is true: net/http's server ends a request's context
// when its client leaves.
func (HTTPHarness[H]) CancelsOnDisconnect() bool { return true }

// BracePattern turns a route path of the suite's syntax, "/users/:id",
// into "/users/{id}", the syntax of chi's and a ServeMux's patterns.
func BracePattern(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// ServeHTTP is every route's handler in a net/http app (chi, a ServeMux):
// it answers Body with the status of Answer.
func (s *Spec) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(s.Answer(r.Context(), r.Header.Get))
	_, _ = w.Write([]byte(Body))
}
