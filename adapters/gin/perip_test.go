package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	ginlimit "github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestPerIPOverSockets: the one-line form, httplimit.PerIP mounted with
// ginlimit.New, served by net/http on a real listener on 127.0.0.1
// (adapterstest.CheckPerIP).
func TestPerIPOverSockets(t *testing.T) {
	adapterstest.CheckPerIP(t, func(t testing.TB, f *httplimit.Flow) string {
		r := gin.New()
		r.Use(ginlimit.New(f))
		r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, adapterstest.Body) })
		return adapterstest.ListenHTTP(t, r)
	})
}
