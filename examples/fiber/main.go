// Command fiber is a small API rate-limited with fiberlimit, the adapter
// for Fiber (v2).
//
// Run it from the module root:
//
//	go run ./examples/fiber
//
// It listens on $ADDR (127.0.0.1:8080 by default) and keeps its limits in
// memory, or in Redis when REDIS_URL is set:
//
//	ADDR=127.0.0.1:9090 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/fiber
//
// With DENY_FILE set, every request but GET /metrics is checked against
// the deny list in that file (one address or CIDR range a line), reloaded
// when the file changes; a malformed file at start is an error naming the
// line:
//
//	DENY_FILE=./deny.txt go run ./examples/fiber
//
// On start it prints the limits and curl command lines to try them. GET
// /metrics serves the limiter's metrics to Prometheus, never limited.
// SIGINT (Ctrl-C) or SIGTERM shuts it down gracefully. The store, limits,
// banner and lifecycle are shared by every example, in
// examples/internal/demo; this file is only Fiber's wiring.
package main

import (
	"context"
	"net"
	"os"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"

	fiberlimit "github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

func main() {
	os.Exit(demo.Run("fiber", newServer))
}

// newServer returns the server of the Fiber app over l.
func newServer(l demo.Limiters) demo.Server { return server{newApp(l)} }

// newApp returns the demo API as a Fiber app, limited by l.
func newApp(l demo.Limiters) *fiber.App {
	app := fiber.New(fiber.Config{
		DisableStartupMessage: true, // demo.Run prints its own banner
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           time.Minute,
	})
	// One layered limiter on every request, 404s included: the global
	// layer per client IP (the connection's peer, not c.IP(), which may
	// come from a proxy header), and the login, API-key and users layers
	// on their routes (demo.NewLimiters; their routes are matched on the
	// path, since app.Use's middleware sees the route "/" whatever the
	// request), all decided in one store call; but Prometheus's scrapes of
	// /metrics. l.Flow adds the deny list, if any, which the skip
	// comes before.
	flow, err := l.Flow(httplimit.WithSkip(func(r keyfuncs.Request) bool {
		return r.Method() == fiber.MethodGet && r.Path() == demo.MetricsPath
	}))
	if err != nil {
		panic(err) // a wiring mistake in this file, found at startup
	}
	app.Use(fiberlimit.New(flow))
	// promhttp is a net/http handler; Fiber's adaptor serves it.
	app.Get(demo.MetricsPath, adaptor.HTTPHandler(l.Metrics))

	app.Get("/", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"message": "hello from fiber"})
	})
	// The login layer guards the form against brute force, per client
	// IP: a right password clears the client's strikes.
	app.Post("/login", func(c *fiber.Ctx) error {
		status, body := l.Authenticate(c.UserContext(), c.Context().RemoteAddr().String(), string(c.Request().PostArgs().Peek(demo.PasswordField)))
		return c.Status(status).JSON(body)
	})
	// The API layer: per API key; a request without X-API-Key gets 400.
	app.Get("/api/data", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"data": []int{1, 2, 3}})
	})
	// A quota per route and client IP (the users and posts layers):
	// /users/1 and /users/2 share one, /users/1/posts has another.
	app.Get("/users/:id", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"id": c.Params("id")})
	})
	app.Get("/users/:id/posts", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"id": c.Params("id"), "posts": []string{}})
	})
	return app
}

// server is a Fiber app as a demo.Server.
type server struct{ app *fiber.App }

func (s server) Serve(ln net.Listener) error        { return s.app.Listener(ln) }
func (s server) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
