// Command gin is a small API rate-limited with ginlimit, the adapter for
// Gin.
//
// Run it from the module root:
//
//	go run ./examples/gin
//
// It listens on $ADDR (127.0.0.1:8080 by default) and keeps its limits in
// memory, or in Redis when REDIS_URL is set:
//
//	ADDR=127.0.0.1:9090 REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/gin
//
// With DENY_FILE set, every request but GET /metrics is checked against
// the deny list in that file (one address or CIDR range a line), reloaded
// when the file changes; a malformed file at start is an error naming the
// line:
//
//	DENY_FILE=./deny.txt go run ./examples/gin
//
// On start it prints the limits and curl command lines to try them. GET
// /metrics serves the limiter's metrics to Prometheus, never limited.
// SIGINT (Ctrl-C) or SIGTERM shuts it down gracefully. The store, limits,
// banner and lifecycle are shared by every example, in
// examples/internal/demo; this file is only Gin's wiring.
package main

import (
	"net/http"
	"os"

	"github.com/gin-gonic/gin"

	ginlimit "github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
)

func main() {
	gin.SetMode(gin.ReleaseMode) // no debug route listing before the banner
	os.Exit(demo.Run("gin", newServer))
}

// newServer returns the server of the Gin app over l.
func newServer(l demo.Limiters) demo.Server { return demo.HTTPServer(newApp(l)) }

// newApp returns the demo API on a Gin engine, limited by l.
func newApp(l demo.Limiters) http.Handler {
	r := gin.New()
	// One layered limiter on every request, 404s included: the global
	// layer per client IP (the socket peer, not Gin's ClientIP, which
	// believes proxy headers by default), and the login, API-key and
	// users layers on their routes (demo.NewLimiters), all decided in
	// one store call; but Prometheus's scrapes of /metrics. l.Flow
	// adds the deny list, if any, which the skip comes before.
	flow, err := l.Flow(httplimit.WithSkip(demo.SkipMetrics))
	if err != nil {
		panic(err) // a wiring mistake in this file, found at startup
	}
	r.Use(gin.Recovery(), ginlimit.New(flow))
	r.GET(demo.MetricsPath, gin.WrapH(l.Metrics))

	r.GET("/", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"message": "hello from gin"})
	})
	// The login layer guards the form against brute force, per client
	// IP: a right password clears the client's strikes.
	r.POST("/login", func(c *gin.Context) {
		status, body := l.Authenticate(c.Request.Context(), c.Request.RemoteAddr, c.Request.PostFormValue(demo.PasswordField))
		c.JSON(status, body)
	})
	// The API layer: per API key; a request without X-API-Key gets 400.
	r.GET("/api/data", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"data": []int{1, 2, 3}})
	})
	// A quota per route and client IP (the users and posts layers):
	// /users/1 and /users/2 share one, /users/1/posts has another.
	users := r.Group("/users")
	users.GET("/:id", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"id": c.Param("id")})
	})
	users.GET("/:id/posts", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"id": c.Param("id"), "posts": []string{}})
	})
	return r
}
