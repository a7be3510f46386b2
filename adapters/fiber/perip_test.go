package fiberlimit_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"

	fiberlimit "github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestPerIPOverSockets: the one-line form, httplimit.PerIP mounted with
// fiberlimit.New, served by Fiber's own server on a real listener on 127.0.0.1
// (adapterstest.CheckPerIP).
func TestPerIPOverSockets(t *testing.T) {
	adapterstest.CheckPerIP(t, func(t testing.TB, f *httplimit.Flow) string {
		a := &app{fiber: fiber.New(fiber.Config{DisableStartupMessage: true})}
		a.fiber.Use(fiberlimit.New(f))
		a.fiber.Get("/", func(c *fiber.Ctx) error { return c.SendString(adapterstest.Body) })
		return a.listen(t)
	})
}
