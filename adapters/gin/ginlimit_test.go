package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

type harness struct{}

func (harness) Pattern(p string) string { return p }
func (harness) UseSeesRoute() bool      { return true }

func (harness) Build(_ testing.TB, spec *adapterstest.Spec) adapterstest.App {
	e := gin.New()
	for _, m := range spec.Global {
		e.Use(ginlimit.New(m.Limiter, m.Options...))
	}
	for _, r := range spec.Routes {
		var hs []gin.HandlerFunc
		for _, m := range r.Limits {
			hs = append(hs, ginlimit.New(m.Limiter, m.Options...))
		}
		hs = append(hs, func(c *gin.Context) {
			spec.Served()
			c.String(http.StatusOK, adapterstest.Body)
		})
		e.Handle(r.Method, r.Path, hs...)
	}
	return app{e}
}

type app struct{ e *gin.Engine }

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
