package echolimit_test

import (
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestCanonicalHeaders reads every field the flow writes with Echo's
// c.Response().Header().Get: in the handler, in a middleware around the
// limiter, and on the httptest recorder Echo's testing guide serves into,
// as an Echo application and its tests do.
func TestCanonicalHeaders(t *testing.T) {
	adapterstest.RunCanonical(t, func(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, read *adapterstest.FieldReads) (int, func(string) string) {
		e := echo.New()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				err := next(c)
				read.After(c.Response().Header().Get)
				return err
			}
		})
		e.Use(echolimit.New(f))
		e.GET("/", func(c echo.Context) error {
			read.Handler(c.Response().Header().Get)
			return c.String(200, adapterstest.Body)
		})
		res := adapterstest.ServeHTTP(e, req) // an httptest.ResponseRecorder's
		return res.Status, res.Header.Get
	})
}
