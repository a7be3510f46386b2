package adapterstest

import (
	"net/http"
	"net/http/httptest"
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
