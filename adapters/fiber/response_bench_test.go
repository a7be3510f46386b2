package fiberlimit

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// BenchmarkResponseSet sets a field of the flow's on a Fiber response:
// from bytes (SetBytes, headers.Writer's path) and from a string (Set,
// Retry-After on a denial).
func BenchmarkResponseSet(b *testing.B) {
	app := fiber.New()
	c := app.AcquireCtx(&fasthttp.RequestCtx{})
	defer app.ReleaseCtx(c)
	w := response{c}
	v := []byte("999")
	b.Run("SetBytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.SetBytes("X-RateLimit-Remaining", v)
		}
	})
	b.Run("Set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w.Set("Retry-After", "60")
		}
	})
}
