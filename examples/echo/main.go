// Command echo is a small API rate-limited with echolimit, the adapter for
// Echo (v4).
//
// Run it from the module root:
//
//	go run ./examples/echo
//
// It listens on $ADDR (127.0.0.1:8080 by default) and keeps its limits in
// memory, or in Redis when REDIS_URL is set:
//
//	ADDR=127.0.0.1:9090 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/echo
//
// With DENY_FILE set, every request but GET /metrics is checked against
// the deny list in that file (one address or CIDR range a line), reloaded
// when the file changes; a malformed file at start is an error naming the
// line:
//
//	DENY_FILE=./deny.txt go run ./examples/echo
//
// On start it prints the limits and curl command lines to try them. GET
// /metrics serves the limiter's metrics to Prometheus, never limited.
// SIGINT (Ctrl-C) or SIGTERM shuts it down gracefully. The store, limits,
// banner and lifecycle are shared by every example, in
// examples/internal/demo; this file is only Echo's wiring.
package main

import (
	"net/http"
	"os"

	"github.com/labstack/echo/v4"

	echolimit "github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
)

func main() {
	os.Exit(demo.Run("echo", newServer))
}

// newServer returns the server of the Echo app over l.
func newServer(l demo.Limiters) demo.Server { return demo.HTTPServer(newApp(l)) }

// newApp returns the demo API on an Echo instance, limited by l.
func newApp(l demo.Limiters) http.Handler {
	e := echo.New()
	// One layered limiter on every request, 404s included: the global
	// layer per client IP (the socket peer, not Echo's RealIP, which
	// believes proxy headers), and the login, API-key and users layers on
	// their routes (demo.NewLimiters), all decided in one store call; but
	// Prometheus's scrapes of /metrics (c.Path() is the route, as Echo
	// routes before running e.Use's middleware). l.Flow adds the deny
	// list, if any, which the skip comes before.
	flow, err := l.Flow(httplimit.WithSkip(demo.SkipMetrics))
	if err != nil {
		panic(err) // a wiring mistake in this file, found at startup
	}
	e.Use(echolimit.New(flow))
	e.GET(demo.MetricsPath, echo.WrapHandler(l.Metrics))

	e.GET("/", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"message": "hello from echo"})
	})
	// The login layer guards the form against brute force, per client
	// IP: a right password clears the client's strikes.
	e.POST("/login", func(c echo.Context) error {
		status, body := l.Authenticate(c.Request().Context(), c.Request().RemoteAddr, c.Request().PostFormValue(demo.PasswordField))
		return c.JSON(status, body)
	})
	// The API layer: per API key; a request without X-API-Key gets 400.
	e.GET("/api/data", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"data": []int{1, 2, 3}})
	})
	// A quota per route and client IP (the users and posts layers):
	// /users/1 and /users/2 share one, /users/1/posts has another.
	users := e.Group("/users")
	users.GET("/:id", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"id": c.Param("id")})
	})
	users.GET("/:id/posts", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]any{"id": c.Param("id"), "posts": []string{}})
	})
	return e
}
