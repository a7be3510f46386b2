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
// On start it prints the limits and curl command lines to try them. GET
// /metrics serves the limiters' metrics to Prometheus, never limited.
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
	// Every request, 404s included, per client IP (the socket peer, not
	// Gin's ClientIP, which believes proxy headers by default); but
	// Prometheus's scrapes of /metrics.
	r.Use(gin.Recovery(), ginlimit.New(l.Global, ginlimit.WithSkip(demo.SkipMetrics)))
	r.GET(demo.MetricsPath, gin.WrapH(l.Metrics))

	r.GET("/", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"message": "hello from gin"})
	})
	// Stricter on the login form, still per client IP.
	r.POST("/login", ginlimit.New(l.Login), func(c *gin.Context) {
		// A real handler checks credentials; the demo accepts anything.
		c.JSON(http.StatusOK, gin.H{"message": "logged in"})
	})
	// Per API key; a request without X-API-Key gets 400.
	r.GET("/api/data", ginlimit.New(l.API, ginlimit.WithKeyFunc(l.APIKey)), func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"data": []int{1, 2, 3}})
	})
	// One limiter, a quota per route and client IP: /users/1 and /users/2
	// share one, /users/1/posts has another.
	users := r.Group("/users", ginlimit.New(l.Users, ginlimit.WithKeyFunc(l.RouteAndIP)))
	users.GET("/:id", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"id": c.Param("id")})
	})
	users.GET("/:id/posts", func(c *gin.Context) {
		c.JSON(http.StatusOK, gin.H{"id": c.Param("id"), "posts": []string{}})
	})
	return r
}
