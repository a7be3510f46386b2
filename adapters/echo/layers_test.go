package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestLayers runs the layered limits suite (httplimit.Layer) over
// real sockets, on a memory store and on Redis.
func TestLayers(t *testing.T) { adapterstest.RunLayers(t, harness{}, redistest.Start(t)) }

// BenchmarkEchoLayers compares the four layers (three apply) with
// a single limit, mounted the same way.
func BenchmarkEchoLayers(b *testing.B) {
	adapterstest.BenchLayersHTTP(b, func(f *httplimit.Flow) http.Handler {
		e := echo.New()
		e.Use(echolimit.New(f))
		e.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		return e
	})
}
