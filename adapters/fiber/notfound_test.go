package fiberlimit_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/reputation"
)

// Fiber tells a route from middleware (app.Use: a not-found handler
// mounted last) by c.Route(), and app.Static's prefixes, whose missing
// files fall through to that handler or to Fiber's own 404; a catch-all
// route as the 404 page it cannot tell, unless the handler marks it.
func (harness) NotFoundIdioms() []adapterstest.NotFoundIdiom {
	return []adapterstest.NotFoundIdiom{
		{Name: "default"},
		{Name: "last-Use", Handler: true},
		{Name: "ErrorHandler", Handler: true},
		{Name: "Static", Static: true},
		{Name: "Static+last-Use", Handler: true, Static: true},
		{Name: "catch-all", Handler: true, CatchAll: true},
		// Not with app.Static: its missing files fall through to the
		// catch-all, which marks them too (docs/reputation.md).
		{Name: "catch-all-marked", Handler: true, CatchAll: true, Marked: true},
	}
}

func (harness) ServeNotFound(t testing.TB, idiom adapterstest.NotFoundIdiom, f *httplimit.Flow, dir string) string {
	cfg := fiber.Config{DisableStartupMessage: true}
	if idiom.Name == "ErrorHandler" { // Fiber's FAQ: a 404 page from the error handler
		cfg.ErrorHandler = func(c *fiber.Ctx, err error) error {
			var fe *fiber.Error
			if errors.As(err, &fe) && fe.Code == fiber.StatusNotFound {
				return c.Status(fiber.StatusNotFound).SendString(adapterstest.NotFoundBody)
			}
			return fiber.DefaultErrorHandler(c, err)
		}
	}
	a := &app{fiber: fiber.New(cfg)}
	a.fiber.Use(fiberlimit.New(f))
	a.fiber.Get("/", func(c *fiber.Ctx) error { return c.SendString(adapterstest.Body) })
	a.fiber.Get("/files/:name", func(c *fiber.Ctx) error { return c.Status(fiber.StatusNotFound).SendString("no such file") })
	if idiom.Static {
		a.fiber.Static("/static", dir)
	}
	notFound := func(c *fiber.Ctx) error {
		if idiom.Marked {
			reputation.MarkUnrouted(c.UserContext())
		}
		return c.Status(fiber.StatusNotFound).SendString(adapterstest.NotFoundBody)
	}
	switch {
	case idiom.CatchAll:
		a.fiber.All("/*", notFound)
	case idiom.Handler && idiom.Name != "ErrorHandler":
		a.fiber.Use(notFound) // Fiber's FAQ: a middleware at the very bottom of the stack
	}
	a.fiber.Handler()
	return a.listen(t)
}

// TestNotFound checks Fiber's idioms for "not found" with a reputation.
func TestNotFound(t *testing.T) { adapterstest.RunNotFound(t, harness{}) }

// TestNotFoundMount: the routes of an app mounted in another (app.Mount)
// are routes, its last app.Use a not-found handler, as in the app itself.
func TestNotFoundMount(t *testing.T) {
	adapterstest.RunNotFoundUnder(t, "/api/", func(t testing.TB, f *httplimit.Flow) string {
		api := fiber.New()
		api.Get("/files/:name", func(c *fiber.Ctx) error { return c.Status(fiber.StatusNotFound).SendString("no such file") })
		api.Use(func(c *fiber.Ctx) error { return c.Status(fiber.StatusNotFound).SendString(adapterstest.NotFoundBody) })
		a := &app{fiber: fiber.New(fiber.Config{DisableStartupMessage: true})}
		a.fiber.Use(fiberlimit.New(f))
		a.fiber.Mount("/api", api)
		a.fiber.Handler()
		return a.listen(t)
	})
}

// BenchmarkNotFound measures a 404 of a path no route serves (Fiber's own
// "Cannot GET"), with a reputation, whose kind fiberlimit reads from the
// app's routes (routeIndex.unrouted), in apps of 10 and 200 routes.
func BenchmarkNotFound(b *testing.B) {
	adapterstest.BenchNotFound(b, func(f *httplimit.Flow, routes int) fasthttp.RequestHandler {
		app := fiber.New()
		app.Use(fiberlimit.New(f))
		for i := range routes {
			app.Get("/r"+strconv.Itoa(i)+"/:id", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		}
		return app.Handler()
	}, func(b *testing.B, h fasthttp.RequestHandler) {
		benchServe(b, h, benchRequest(b, adapterstest.BenchUnroutedPath), fiber.StatusNotFound)
	})
}
