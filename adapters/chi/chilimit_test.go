package chilimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/middleware"
)

type harness struct{}

// Pattern turns "/users/:id" into chi's "/users/{id}".
func (harness) Pattern(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

func (harness) UseSeesRoute() bool { return true }

func (h harness) Build(_ testing.TB, spec *adapterstest.Spec) adapterstest.App {
	r := chi.NewRouter()
	for _, m := range spec.Global {
		r.Use(chilimit.New(m.Limiter, m.Options...))
	}
	for _, rt := range spec.Routes {
		var mws []func(http.Handler) http.Handler
		for _, m := range rt.Limits {
			mws = append(mws, chilimit.New(m.Limiter, m.Options...))
		}
		r.With(mws...).Method(rt.Method, h.Pattern(rt.Path), served(spec))
	}
	return app{r}
}

func served(spec *adapterstest.Spec) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		spec.Served()
		_, _ = w.Write([]byte(adapterstest.Body))
	}
}

type app struct{ h http.Handler }

func (a app) Do(_ testing.TB, req adapterstest.Request) adapterstest.Response {
	r := httptest.NewRequest(req.Method, req.Path, nil)
	r.RemoteAddr = req.RemoteAddr
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	if req.Context != nil {
		r = r.WithContext(req.Context)
	}
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	return adapterstest.Response{Status: w.Code, Header: w.Header(), Body: w.Body.String()}
}

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }

// routeRecorder is a limiter keyed on the route, recording every key.
func routeRecorder(t *testing.T, keys *[]string) func(http.Handler) http.Handler {
	t.Helper()
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute})
	route := keyfuncs.Route()
	return chilimit.New(l, middleware.WithKeyFunc(func(r keyfuncs.Request) (string, error) {
		k, err := route(r)
		*keys = append(*keys, k)
		return k, err
	}))
}

// TestRouteAnywhere checks Route wherever the limiter is mounted: before
// routing, in a subrouter's Use, inline, across Mount, and in plain
// net/http.
func TestRouteAnywhere(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	tests := []struct {
		name  string
		build func(mw func(http.Handler) http.Handler) http.Handler
		path  string
		want  string
	}{
		{"Use before routing", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Get("/users/{id}", ok)
			return r
		}, "/users/7", "/users/{id}"},
		{"Use before routing, no match", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Get("/users/{id}", ok)
			return r
		}, "/elsewhere/7", "<unmatched>"},
		{"With", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Get("/users/{id}", ok)
			return r
		}, "/users/7", "/users/{id}"},
		{"Route with Use inside", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) {
				r.Use(mw)
				r.Get("/users/{id}", ok)
			})
			return r
		}, "/api/users/7", "/api/users/{id}"},
		{"Group", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(mw)
				r.Get("/users/{id}", ok)
			})
			return r
		}, "/users/7", "/users/{id}"},
		{"Mount, limiter on top", func(mw func(http.Handler) http.Handler) http.Handler {
			sub := chi.NewRouter()
			sub.Get("/items/{id}", ok)
			r := chi.NewRouter()
			r.Use(mw)
			r.Mount("/shop", sub)
			return r
		}, "/shop/items/3", "/shop/items/{id}"},
		{"Mount, limiter in the subrouter", func(mw func(http.Handler) http.Handler) http.Handler {
			sub := chi.NewRouter()
			sub.Use(mw)
			sub.Get("/items/{id}", ok)
			r := chi.NewRouter()
			r.Mount("/shop", sub)
			return r
		}, "/shop/items/3", "/shop/items/{id}"},
		{"net/http ServeMux, per route", func(mw func(http.Handler) http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /users/{id}", mw(http.HandlerFunc(ok)))
			return mux
		}, "/users/7", "GET /users/{id}"},
		{"net/http, whole mux wrapped", func(mw func(http.Handler) http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /users/{id}", ok)
			return mw(mux)
		}, "/users/7", "<unmatched>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var keys []string
			h := tc.build(routeRecorder(t, &keys))
			req := httptest.NewRequest("GET", tc.path, nil)
			h.ServeHTTP(httptest.NewRecorder(), req)
			if len(keys) != 1 || keys[0] != "route:GET "+tc.want {
				t.Errorf("keys %q, want [%q]", keys, "route:GET "+tc.want)
			}
		})
	}
}

func TestUserFromContext(t *testing.T) {
	type ctxKey struct{}
	var keys []string
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute})
	user := chilimit.UserFromContext(ctxKey{})
	mw := chilimit.New(l, middleware.WithKeyFunc(func(r keyfuncs.Request) (string, error) {
		k, err := user(r)
		keys = append(keys, k)
		return k, err
	}))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	req = req.WithContext(context.WithValue(req.Context(), ctxKey{}, "alice"))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 || len(keys) != 1 || keys[0] != "user:alice" {
		t.Errorf("status %d, keys %q", w.Code, keys)
	}
}

func TestNewPanicsOnNilLimiter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	chilimit.New(nil)
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func BenchmarkChi(b *testing.B) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: core.MaxLimit, Window: time.Hour}
	for _, withLimiter := range []bool{false, true} {
		name := "NoLimiter"
		r := chi.NewRouter()
		if withLimiter {
			name = "Limiter"
			l, err := core.NewLimiter(adapterstest.NewStore(b), p)
			if err != nil {
				b.Fatal(err)
			}
			r.Use(chilimit.New(l))
		}
		r.Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/users/1", nil)
			req.RemoteAddr = "203.0.113.7:51234"
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				r.ServeHTTP(w, req)
			}
		})
	}
}
