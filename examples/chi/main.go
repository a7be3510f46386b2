// Command chi is a small API rate-limited with chilimit, the adapter for
// chi and any net/http router.
//
// Run it from the module root:
//
//	go run ./examples/chi
//
// It listens on $ADDR (127.0.0.1:8080 by default) and keeps its limits in
// memory, or in Redis when REDIS_URL is set:
//
//	ADDR=127.0.0.1:9090 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/chi
//
// With DENY_FILE set, every request but GET /metrics is checked against
// the deny list in that file (one address or CIDR range a line), reloaded
// when the file changes; a malformed file at start is an error naming the
// line:
//
//	DENY_FILE=./deny.txt go run ./examples/chi
//
// On start it prints the limits and curl command lines to try them. GET
// /metrics serves the limiter's metrics to Prometheus, never limited.
// SIGINT (Ctrl-C) or SIGTERM shuts it down gracefully. The store, limits,
// banner and lifecycle are shared by every example, in
// examples/internal/demo; this file is only chi's wiring.
package main

import (
	"encoding/json"
	"net/http"
	"os"

	"github.com/go-chi/chi/v5"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
)

func main() {
	os.Exit(demo.Run("chi", newServer))
}

// newServer returns the server of the chi app over l.
func newServer(l demo.Limiters) demo.Server { return demo.HTTPServer(newApp(l)) }

// newApp returns the demo API on a chi router, limited by l.
func newApp(l demo.Limiters) http.Handler {
	r := chi.NewRouter()
	// One layered limiter on every request, 404s included: the global
	// layer per client IP (the socket peer: no proxy header is believed,
	// and chi's middleware.RealIP must not run before it), and the login,
	// API-key and users layers on their routes (demo.NewLimiters), all
	// decided in one store call; but Prometheus's scrapes of /metrics.
	// l.Flow adds the deny list, if any, which the skip comes before.
	flow, err := l.Flow(httplimit.WithSkip(demo.SkipMetrics))
	if err != nil {
		panic(err) // a wiring mistake in this file, found at startup
	}
	r.Use(chilimit.New(flow))
	r.Method(http.MethodGet, demo.MetricsPath, l.Metrics)

	r.Get("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"message": "hello from chi"})
	})
	// The login layer guards the form against brute force, per client
	// IP: a right password clears the client's strikes.
	r.Post("/login", func(w http.ResponseWriter, r *http.Request) {
		status, body := l.Authenticate(r.Context(), r.RemoteAddr, r.PostFormValue(demo.PasswordField))
		writeJSON(w, status, body)
	})
	// The API layer: per API key; a request without X-API-Key gets 400.
	r.Get("/api/data", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"data": []int{1, 2, 3}})
	})
	// A quota per route and client IP (the users and posts layers):
	// /users/1 and /users/2 share one, /users/1/posts has another.
	r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"id": chi.URLParam(r, "id")})
	})
	r.Get("/users/{id}/posts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"id": chi.URLParam(r, "id"), "posts": []string{}})
	})
	return r
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}
