package muxadapter_test

import (
	"net/http"
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// harness builds the suite's apps on a ServeMux limited by limit.
type harness struct {
	adapterstest.HTTPHarness[harness]
}

// Pattern turns "/users/:id" into the ServeMux's "/users/{id}", and "/"
// into "/{$}", the pattern of the root alone.
func (harness) Pattern(p string) string {
	if p == "/" {
		return "/{$}"
	}
	return adapterstest.BracePattern(p)
}

func (harness) UseSeesRoute() bool { return true }

// Handler is the app of spec: a ServeMux, each route's limits around its
// handler, the global ones around the mux, the first outermost.
func (h harness) Handler(spec *adapterstest.Spec) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range spec.Routes {
		mux.Handle(rt.Method+" "+h.Pattern(rt.Path), chain(rt.Limits, spec))
	}
	app := chain(spec.Global, mux)
	if auth := spec.Authenticate; auth != nil {
		inner := app
		app = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(w, r.WithContext(auth(r.Context(), r.Header.Get)))
		})
	}
	return app
}

// chain returns next limited by each of ms, the first outermost.
func chain(ms []adapterstest.Mount, next http.Handler) http.Handler {
	for i := len(ms) - 1; i >= 0; i-- {
		next = limit(ms[i].Flow, next)
	}
	return next
}

// canonical reads the fields with http.Header.Get, in the handler, in a
// handler around the limited mux, and on an httptest.ResponseRecorder.
func canonical(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, read *adapterstest.FieldReads) (int, func(string) string) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		read.Handler(w.Header().Get)
		_, _ = w.Write([]byte(adapterstest.Body))
	})
	limited := limit(f, mux)
	res := adapterstest.ServeHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limited.ServeHTTP(w, r)
		read.After(w.Header().Get)
	}), req)
	return res.Status, res.Header.Get
}

func TestSuite(t *testing.T)            { adapterstest.Run(t, harness{}) }
func TestCanonicalHeaders(t *testing.T) { adapterstest.RunCanonical(t, canonical) }
func TestSpelling(t *testing.T)         { adapterstest.RunSpelling(t, harness{}) }
func TestAccess(t *testing.T)           { adapterstest.RunAccess(t, harness{}) }
func TestPanics(t *testing.T)           { adapterstest.RunPanics(t, harness{}) }
func TestShadow(t *testing.T)           { adapterstest.RunShadow(t, harness{}) }
func TestProblemDetails(t *testing.T)   { adapterstest.RunProblemDetails(t, harness{}) }
func TestDoors(t *testing.T)            { adapterstest.RunDoors(t, harness{}) }
func TestLayersOutage(t *testing.T)     { adapterstest.RunLayersOutage(t, harness{}) }
func TestNotFound(t *testing.T)         { adapterstest.RunNotFound(t, adapterstest.ServeMuxNotFound(limit)) }

// The cases that run on memory and on Redis share one redis-server.
func TestRedis(t *testing.T) {
	srv := redistest.Start(t)
	for name, run := range map[string]func(*testing.T, adapterstest.SocketHarness, *redistest.Server){
		"Sockets":       adapterstest.RunDisconnects,
		"Lockout":       adapterstest.RunLockout,
		"Quota":         adapterstest.RunQuota,
		"Settle":        adapterstest.RunSettle,
		"Reputation":    adapterstest.RunReputation,
		"Bans":          adapterstest.RunBans,
		"Layers":        adapterstest.RunLayers,
		"LayersAttacks": adapterstest.RunLayersAttacks,
		"DerivedLimits": adapterstest.RunDerivedLimits,
		"Overrides":     adapterstest.RunOverrides,
	} {
		t.Run(name, func(t *testing.T) { run(t, harness{}, srv) })
	}
}
