package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// Gin tells them all by its route (c.FullPath()): NoRoute runs with no
// route, and r.Static's missing files run NoRoute's handlers on the
// static route.
func (harness) NotFoundIdioms() []adapterstest.NotFoundIdiom {
	return []adapterstest.NotFoundIdiom{
		{Name: "default"},
		{Name: "NoRoute", Handler: true},
		{Name: "Static", Static: true},
		{Name: "NoRoute+Static", Handler: true, Static: true},
	}
}

func (harness) ServeNotFound(t testing.TB, idiom adapterstest.NotFoundIdiom, f *httplimit.Flow, dir string) string {
	r := gin.New()
	r.Use(ginlimit.New(f))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, adapterstest.Body) })
	r.GET("/files/:name", func(c *gin.Context) { c.String(http.StatusNotFound, "no such file") })
	if idiom.Static {
		r.Static("/static", dir)
	}
	if idiom.Handler {
		r.NoRoute(func(c *gin.Context) { c.String(http.StatusNotFound, adapterstest.NotFoundBody) })
	}
	return adapterstest.ListenHTTP(t, r)
}

// TestNotFound checks Gin's idioms for "not found" with a reputation.
func TestNotFound(t *testing.T) { adapterstest.RunNotFound(t, harness{}) }
