package fiberlimit_test

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestCanonicalHeaders reads every field the flow writes with Fiber's
// c.GetRespHeader: in the handler and in a middleware around the limiter;
// and from the response of app.Test, as a Fiber application and its
// tests do.
func TestCanonicalHeaders(t *testing.T) {
	adapterstest.RunCanonical(t, func(t testing.TB, f *httplimit.Flow, req adapterstest.Request, read *adapterstest.FieldReads) (int, func(string) string) {
		get := func(c *fiber.Ctx) func(string) string {
			return func(name string) string { return c.GetRespHeader(name) }
		}
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(func(c *fiber.Ctx) error {
			err := c.Next()
			read.After(get(c))
			return err
		})
		app.Use(fiberlimit.New(f))
		app.Get("/", func(c *fiber.Ctx) error {
			read.Handler(get(c))
			return c.SendString(adapterstest.Body)
		})
		res, err := app.Test(adapterstest.NewRequest(req), -1)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode, res.Header.Get
	})
}
