package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/reputation"
)

// Echo tells e.RouteNotFound's route from a route by its router's routes;
// a catch-all route as the 404 page it cannot tell, unless the handler
// marks it.
func (harness) NotFoundIdioms() []adapterstest.NotFoundIdiom {
	return []adapterstest.NotFoundIdiom{
		{Name: "default"},
		{Name: "RouteNotFound", Handler: true},
		{Name: "Static", Static: true},
		{Name: "RouteNotFound+Static", Handler: true, Static: true},
		{Name: "catch-all", Handler: true, CatchAll: true},
		{Name: "catch-all-marked", Handler: true, CatchAll: true, Marked: true, Static: true},
	}
}

func (harness) ServeNotFound(t testing.TB, idiom adapterstest.NotFoundIdiom, f *httplimit.Flow, dir string) string {
	e := echo.New()
	e.Use(echolimit.New(f))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, adapterstest.Body) })
	e.GET("/files/:name", func(c echo.Context) error { return echo.ErrNotFound })
	if idiom.Static {
		e.Static("/static", dir)
	}
	notFound := func(c echo.Context) error {
		if idiom.Marked {
			reputation.MarkUnrouted(c.Request().Context())
		}
		return c.String(http.StatusNotFound, adapterstest.NotFoundBody)
	}
	switch {
	case idiom.CatchAll:
		e.Any("/*", notFound)
	case idiom.Handler:
		e.RouteNotFound("/*", notFound)
	}
	return adapterstest.ListenHTTP(t, e)
}

// TestNotFound checks Echo's idioms for "not found" with a reputation.
func TestNotFound(t *testing.T) { adapterstest.RunNotFound(t, harness{}) }

// TestNotFoundGroupMiddleware: a group's middleware registers
// e.RouteNotFound routes under the group's prefix, so that it runs on
// every path there; a scanner walking unknown paths under the group is
// still one.
func TestNotFoundGroupMiddleware(t *testing.T) {
	adapterstest.RunNotFoundUnder(t, "/api/", func(t testing.TB, f *httplimit.Flow) string {
		e := echo.New()
		e.Use(echolimit.New(f))
		api := e.Group("/api", func(next echo.HandlerFunc) echo.HandlerFunc { return next }) // an auth middleware, say
		api.GET("/files/:name", func(c echo.Context) error { return echo.ErrNotFound })
		return adapterstest.ListenHTTP(t, e)
	})
}
