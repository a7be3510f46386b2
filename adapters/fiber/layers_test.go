package fiberlimit_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestLayers runs the layered limits suite (httplimit.Layer) over
// real sockets, on a memory store and on Redis.
func TestLayers(t *testing.T) { adapterstest.RunLayers(t, harness{}, redistest.Start(t)) }

// BenchmarkFiberLayers compares the four layers (three apply) with
// a single limit, served as BenchmarkFiber serves.
func BenchmarkFiberLayers(b *testing.B) {
	adapterstest.BenchLayers(b, func(f *httplimit.Flow) fasthttp.RequestHandler {
		app := fiber.New()
		app.Use(fiberlimit.New(f))
		app.Get("/users/:id", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		return app.Handler()
	}, func(b *testing.B, h fasthttp.RequestHandler) {
		var req fasthttp.Request
		req.Header.SetMethod("GET")
		req.SetRequestURI(adapterstest.BenchPath)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, tcpAddr(b, adapterstest.BenchPeer), nil)
		b.ReportAllocs()
		for b.Loop() {
			ctx.Response.Reset()
			h(&ctx)
			if ctx.Response.StatusCode() != fiber.StatusOK {
				b.Fatal(ctx.Response.StatusCode())
			}
		}
	})
}
