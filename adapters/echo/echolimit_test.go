package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
)

type harness struct{}

func (harness) Pattern(p string) string { return p }
func (harness) UseSeesRoute() bool      { return true }

func (harness) Build(_ testing.TB, spec *adapterstest.Spec) adapterstest.App {
	e := echo.New()
	e.Use(adapterstest.Middlewares(spec.Global, echolimit.New)...)
	for _, r := range spec.Routes {
		e.Add(r.Method, r.Path, func(c echo.Context) error {
			spec.Served()
			return c.String(http.StatusOK, adapterstest.Body)
		}, adapterstest.Middlewares(r.Limits, echolimit.New)...)
	}
	return adapterstest.HTTPApp(e)
}

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }
