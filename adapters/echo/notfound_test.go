package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
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

// BenchmarkNotFound measures a 404 of e.RouteNotFound with a reputation,
// whose kind echolimit reads from the router's routes, in apps of 10 and
// 200 routes.
func BenchmarkNotFound(b *testing.B) {
	adapterstest.BenchNotFound(b, func(f *httplimit.Flow, routes int) *echo.Echo {
		e := echo.New()
		e.Use(echolimit.New(f))
		for i := range routes {
			e.GET("/r"+strconv.Itoa(i)+"/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		}
		e.RouteNotFound("/*", func(c echo.Context) error { return c.NoContent(http.StatusNotFound) })
		return e
	}, func(b *testing.B, e *echo.Echo) {
		req := httptest.NewRequest("GET", adapterstest.BenchUnroutedPath, nil)
		req.RemoteAddr = adapterstest.BenchPeer
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			if w.Code != http.StatusNotFound {
				b.Fatal(w.Code)
			}
		}
	})
}

// TestNotFoundRoutesAddedLater: routes registered after the first 404
// are seen: a route's 404 is NotFound, and a RouteNotFound's is Unrouted.
// (Echo wants its routes registered before it serves, and sizes its
// contexts for their parameters then: these have none.)
func TestNotFoundRoutesAddedLater(t *testing.T) {
	rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "never", Above: 1e6, Ban: true}},
		Weights: map[reputation.Signal]float64{reputation.NotFound: 1}})
	require.NoError(t, err)
	var got []reputation.Signal
	var last map[reputation.Signal]uint64
	heard := func() { // the signal scored since the last call
		now := rep.Stats().Signals
		for s, n := range now {
			if n > last[s] {
				got = append(got, s)
			}
		}
		last = now
	}
	f, err := httplimit.New(adapterstest.NewStore(t), []httplimit.Layer{{Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour}}}, httplimit.WithReputation(rep))
	require.NoError(t, err)
	e := echo.New()
	e.Use(echolimit.New(f))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	get := func(path string) {
		t.Helper()
		res := adapterstest.ServeHTTP(e, adapterstest.Request{Method: "GET", Path: path, RemoteAddr: adapterstest.BenchPeer})
		require.Equal(t, http.StatusNotFound, res.Status, path)
		heard()
	}
	get("/old")
	e.RouteNotFound("/old", func(c echo.Context) error { return c.NoContent(http.StatusNotFound) })
	get("/old")
	e.GET("/gone", func(c echo.Context) error { return echo.ErrNotFound })
	get("/gone")
	assert.Equal(t, []reputation.Signal{reputation.Unrouted, reputation.Unrouted, reputation.NotFound}, got)
}
