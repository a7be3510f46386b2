package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
)

func TestNewPanicsOnNilLimiter(t *testing.T) {
	adapterstest.CheckPanics(t, "New(nil)", func() { echolimit.New(nil) })
}

func TestNewPanicsOnNilSkipper(t *testing.T) {
	l := adapterstest.FixedLimiter(t, 1)
	adapterstest.CheckPanics(t, "New(l, WithSkipper(nil))", func() { echolimit.New(l, echolimit.WithSkipper(nil)) })
}

func TestUserFromContextAndSkipper(t *testing.T) {
	skip := echolimit.WithSkipper(func(c echo.Context) bool { return c.Path() == "/health" })
	adapterstest.CheckInvalidKeyFunc(t)(echolimit.UserFromContext(""))
	adapterstest.CheckUserKey(t, adapterstest.MustKeyFunc(t)(echolimit.UserFromContext("user")), skip, func(m adapterstest.Mount) adapterstest.App {
		e := echo.New()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				if id := c.Request().Header.Get(adapterstest.UserHeader); id != "" {
					c.Set("user", id) // as an authentication middleware would
				}
				return next(c)
			}
		})
		e.Use(echolimit.New(m.Limiter, m.Options...))
		e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		e.GET("/health", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		return adapterstest.HTTPApp(e)
	})
}

func BenchmarkEcho(b *testing.B) {
	adapterstest.BenchHTTP(b, func(l *core.Limiter) http.Handler {
		e := echo.New()
		if l != nil {
			e.Use(echolimit.New(l))
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
		e.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, echolimit.New(m.Limiter, m.Options...))
		return adapterstest.HTTPApp(e)
	})
}
