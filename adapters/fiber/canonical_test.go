package fiberlimit_test

import (
	"net/http/httptest"
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
func TestCanonicalHeaders(t *testing.T) { adapterstest.RunCanonical(t, canonicalHarness{}) }

type canonicalHarness struct{}

func (canonicalHarness) ServeOne(t testing.TB, f *httplimit.Flow, req adapterstest.Request, names []string) adapterstest.HeaderReads {
	var got adapterstest.HeaderReads
	get := func(c *fiber.Ctx) func(string) string {
		return func(name string) string { return c.GetRespHeader(name) }
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(func(c *fiber.Ctx) error {
		err := c.Next()
		got.After = adapterstest.ReadFields(names, get(c))
		return err
	})
	app.Use(fiberlimit.New(f))
	app.Get("/", func(c *fiber.Ctx) error {
		got.Handler = adapterstest.ReadFields(names, get(c))
		return c.SendString(adapterstest.Body)
	})
	r := httptest.NewRequest(req.Method, req.Path, nil)
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	res, err := app.Test(r, -1)
	require.NoError(t, err)
	defer res.Body.Close()
	got.Status = res.StatusCode
	got.Recorder = adapterstest.ReadFields(names, res.Header.Get)
	return got
}
