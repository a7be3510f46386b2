package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

func TestNewPanicsOnNilFlow(t *testing.T) {
	adapterstest.CheckPanics(t, "New(nil)", func() { echolimit.New(nil) })
}

func TestUserAndSkip(t *testing.T) {
	skip := httplimit.WithSkip(func(r keyfuncs.Request) bool {
		c, ok := echolimit.Unwrap(r)
		return ok && c.Path() == "/health"
	})
	adapterstest.CheckInvalidKeyFunc(t)(echolimit.User(""))
	adapterstest.CheckInvalidKeyFunc(t)(echolimit.User(42)) // echo.Context.Set takes a string
	// A user stored as a struct is a misconfiguration: 500.
	adapterstest.CheckUserKey(t, adapterstest.MustKeyFunc(t)(echolimit.User("user")), skip, http.StatusInternalServerError, func(m adapterstest.Mount) adapterstest.App {
		e := echo.New()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if id := c.Request().Header.Get(adapterstest.UserHeader); id != "" {
					c.Set("user", adapterstest.UserValue(id)) // as an authentication middleware would
				}
				return next(c)
			}
		})
		e.Use(echolimit.New(m.Flow))
		e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		e.GET("/health", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		return adapterstest.HTTPApp(e)
	})
}

func BenchmarkEcho(b *testing.B) {
	adapterstest.BenchHTTP(b, func(f *httplimit.Flow) http.Handler {
		e := echo.New()
		if f != nil {
			e.Use(echolimit.New(f))
		}
		e.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		return e
	})
}

func TestUnwrap(t *testing.T) {
	param := func(r keyfuncs.Request) (string, bool) {
		c, ok := echolimit.Unwrap(r)
		if !ok {
			return "", false
		}
		return c.Param("id"), true
	}
	adapterstest.CheckUnwrap(t, param, func(m adapterstest.Mount) adapterstest.App {
		e := echo.New()
		e.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, echolimit.New(m.Flow))
		return adapterstest.HTTPApp(e)
	})
}
