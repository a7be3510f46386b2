package echolimit_test

import (
	"net/http/httptest"
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
func TestCanonicalHeaders(t *testing.T) { adapterstest.RunCanonical(t, canonicalHarness{}) }

type canonicalHarness struct{}

func (canonicalHarness) ServeOne(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, names []string) adapterstest.HeaderReads {
	var got adapterstest.HeaderReads
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			got.After = adapterstest.ReadFields(names, c.Response().Header().Get)
			return err
		}
	})
	e.Use(echolimit.New(f))
	e.GET("/", func(c echo.Context) error {
		got.Handler = adapterstest.ReadFields(names, c.Response().Header().Get)
		return c.String(200, adapterstest.Body)
	})
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(req.Method, req.Path, nil)
	r.RemoteAddr = req.RemoteAddr
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	e.ServeHTTP(rec, r)
	got.Status = rec.Code
	got.Recorder = adapterstest.ReadFields(names, rec.Header().Get)
	return got
}
