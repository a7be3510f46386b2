package echolimit_test

import (
	"net/http"
	"net/http/httptest"
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
	for _, m := range spec.Global {
		e.Use(echolimit.New(m.Limiter, m.Options...))
	}
	for _, r := range spec.Routes {
		var mws []echo.MiddlewareFunc
		for _, m := range r.Limits {
			mws = append(mws, echolimit.New(m.Limiter, m.Options...))
		}
		e.Add(r.Method, r.Path, func(c echo.Context) error {
			spec.Served()
			return c.String(http.StatusOK, adapterstest.Body)
		}, mws...)
	}
	return app{e}
}

type app struct{ e *echo.Echo }

func (a app) Do(_ testing.TB, req adapterstest.Request) adapterstest.Response {
	r := httptest.NewRequest(req.Method, req.Path, nil)
	r.RemoteAddr = req.RemoteAddr
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	if req.Context != nil {
		r = r.WithContext(req.Context)
	}
	w := httptest.NewRecorder()
	a.e.ServeHTTP(w, r)
	return adapterstest.Response{Status: w.Code, Header: w.Header(), Body: w.Body.String()}
}

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }
