package ginlimit_test

import (
	"net/http"
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
	e.Use(adapterstest.Middlewares(spec.Global, ginlimit.New)...)
	for _, r := range spec.Routes {
		hs := append(adapterstest.Middlewares(r.Limits, ginlimit.New), func(c *gin.Context) {
			spec.Served()
			c.String(http.StatusOK, adapterstest.Body)
		})
		e.Handle(r.Method, r.Path, hs...)
	}
	return adapterstest.HTTPApp(e)
}

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }
