package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestLayers runs the layered limits suite (httplimit.Layer) over
// real sockets, on a memory store and on Redis.
func TestLayers(t *testing.T) { adapterstest.RunLayers(t, harness{}, redistest.Start(t)) }

// BenchmarkGinLayers compares the four layers (three apply) with
// a single limit, mounted the same way.
func BenchmarkGinLayers(b *testing.B) {
	adapterstest.BenchLayersHTTP(b, func(f *httplimit.Flow) http.Handler {
		e := gin.New()
		e.Use(ginlimit.New(f))
		e.GET("/users/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
		return e
	})
}
