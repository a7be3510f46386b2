package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	echolimit "github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestPerIPOverSockets: the one-line form, httplimit.PerIP mounted with
// echolimit.New, served by net/http on a real listener on 127.0.0.1
// (adapterstest.CheckPerIP).
func TestPerIPOverSockets(t *testing.T) {
	adapterstest.CheckPerIP(t, func(t testing.TB, f *httplimit.Flow) string {
		e := echo.New()
		e.Use(echolimit.New(f))
		e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, adapterstest.Body) })
		return adapterstest.ListenHTTP(t, e)
	})
}
