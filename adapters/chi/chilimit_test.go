package chilimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

type harness struct {
	adapterstest.HTTPHarness[harness]
}

// Pattern turns "/users/:id" into chi's "/users/{id}".
func (harness) Pattern(p string) string { return adapterstest.BracePattern(p) }

func (harness) UseSeesRoute() bool { return true }

// Handler is the app of spec: a chi router, without Recoverer.
func (h harness) Handler(spec *adapterstest.Spec) http.Handler {
	r := chi.NewRouter()
	if auth := spec.Authenticate; auth != nil {
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				next.ServeHTTP(w, r.WithContext(auth(r.Context(), r.Header.Get)))
			})
		})
	}
	r.Use(adapterstest.Middlewares(spec.Global, chilimit.New)...)
	for _, rt := range spec.Routes {
		r.With(adapterstest.Middlewares(rt.Limits, chilimit.New)...).Method(rt.Method, h.Pattern(rt.Path), spec)
	}
	return r
}

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }

// TestSockets runs the disconnect attack over real sockets, on one
// redis-server for the whole run.
func TestSockets(t *testing.T) { adapterstest.RunDisconnects(t, harness{}, redistest.Start(t)) }

// TestLockout checks brute-force lockouts over real sockets, on memory
// and on Redis with two app servers.
func TestLockout(t *testing.T) { adapterstest.RunLockout(t, harness{}, redistest.Start(t)) }

// TestShadow checks shadow mode over real sockets.
func TestShadow(t *testing.T) { adapterstest.RunShadow(t, harness{}) }

// TestProblemDetails checks problem details (httplimit.WithProblemDetails)
// over real sockets.
func TestProblemDetails(t *testing.T) { adapterstest.RunProblemDetails(t, harness{}) }

// TestQuota checks the quota endpoint (httplimit.WithQuota) over real
// sockets, on memory and on Redis with two app servers.
func TestQuota(t *testing.T) { adapterstest.RunQuota(t, harness{}, redistest.Start(t)) }

// TestSettle checks layers that count by the response over real
// sockets, on memory and on Redis with two app servers.
func TestSettle(t *testing.T) { adapterstest.RunSettle(t, harness{}, redistest.Start(t)) }

// TestSettleCluster plays the README's layered login on a Redis Cluster
// over real sockets, from two app servers: good logins, 5 at a time, are
// never refused, and leave the login layer empty.
func TestSettleCluster(t *testing.T) { adapterstest.RunSettleCluster(t, harness{}) }

// TestReputation checks reputations over real sockets, on memory and on
// Redis with two app servers.
func TestReputation(t *testing.T) { adapterstest.RunReputation(t, harness{}, redistest.Start(t)) }

// TestBans checks bans over real sockets: in process, and through Redis
// between two app servers.
func TestBans(t *testing.T) { adapterstest.RunBans(t, harness{}, redistest.Start(t)) }

// TestSpelling checks the rate-limit field names on the wire.
func TestSpelling(t *testing.T) { adapterstest.RunSpelling(t, harness{}) }

// TestAccess checks allow and deny lists over real sockets, forged
// forwarding headers included.
func TestAccess(t *testing.T) { adapterstest.RunAccess(t, harness{}) }

func TestPanics(t *testing.T) { adapterstest.RunPanics(t, harness{}) }

// routeRecorder is a limiter keyed on the route, recording every key in log.
func routeRecorder(t *testing.T, log *adapterstest.KeyLog) func(http.Handler) http.Handler {
	t.Helper()
	return chilimit.New(adapterstest.FixedMount(t, 100, log.Wrap(keyfuncs.Route())).Flow)
}

// TestRouteAnywhere checks Route wherever the limiter is mounted: before
// routing, in a subrouter's Use, inline, across Mount, and in plain
// net/http.
func TestRouteAnywhere(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	useBeforeRouting := func(mw func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(mw)
		r.Get("/users/{id}", ok)
		return r
	}
	tests := []struct {
		name  string
		build func(mw func(http.Handler) http.Handler) http.Handler
		path  string
		want  string
	}{
		{"Use before routing", useBeforeRouting, "/users/7", "/users/{id}"},
		{"Use before routing, no match", useBeforeRouting, "/elsewhere/7", "<unmatched>"},
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
			var log adapterstest.KeyLog
			h := tc.build(routeRecorder(t, &log))
			req := httptest.NewRequest("GET", tc.path, nil)
			h.ServeHTTP(httptest.NewRecorder(), req)
			assert.Equal(t, []string{"route:GET " + tc.want}, log.Keys(), "keys")
		})
	}
}

// TestUser keys by a user ID stored in the request's context, with
// keyfuncs.User.
func TestUser(t *testing.T) {
	type ctxKey struct{}
	user := adapterstest.MustKeyFunc(t)(keyfuncs.User(func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxKey{}).(string)
		return id, ok
	}))
	// keyfuncs.User's getter returns a string: a user stored as a struct
	// is no user to it, refused 400 as a request without a key.
	adapterstest.CheckUserKey(t, user, nil, http.StatusBadRequest, func(m adapterstest.Mount) adapterstest.App {
		r := chi.NewRouter()
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if id := r.Header.Get(adapterstest.UserHeader); id != "" {
					// As an authentication middleware would.
					r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, adapterstest.UserValue(id)))
				}
				next.ServeHTTP(w, r)
			})
		})
		r.Use(chilimit.New(m.Flow))
		ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
		r.Get("/", ok)
		r.Get("/health", ok)
		return adapterstest.HTTPApp(r)
	})
}

func TestNewPanicsOnNilFlow(t *testing.T) {
	adapterstest.CheckPanics(t, "New(nil)", func() { chilimit.New(nil) })
}

func BenchmarkChi(b *testing.B) {
	adapterstest.BenchHTTP(b, func(f *httplimit.Flow) http.Handler {
		r := chi.NewRouter()
		if f != nil {
			r.Use(chilimit.New(f))
		}
		r.Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		return r
	})
}

func TestUnwrap(t *testing.T) {
	param := func(r keyfuncs.Request) (string, bool) {
		req, ok := chilimit.Unwrap(r)
		if !ok {
			return "", false
		}
		return chi.URLParam(req, "id"), true
	}
	adapterstest.CheckUnwrap(t, param, func(m adapterstest.Mount) adapterstest.App {
		r := chi.NewRouter()
		r.With(chilimit.New(m.Flow)).Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		return adapterstest.HTTPApp(r)
	})
}
