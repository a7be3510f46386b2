package fiberlimit_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
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
	for _, n := range []int{10, 200} {
		b.Run(strconv.Itoa(n)+"routes", func(b *testing.B) {
			rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "never", Above: 1e15, Ban: true}}})
			if err != nil {
				b.Fatal(err)
			}
			f, err := httplimit.New(adapterstest.NewStore(b), []httplimit.Layer{{Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 1_000_000_000_000, Window: time.Hour}}}, httplimit.WithReputation(rep))
			if err != nil {
				b.Fatal(err)
			}
			app := fiber.New()
			app.Use(fiberlimit.New(f))
			for i := range n {
				app.Get("/r"+strconv.Itoa(i)+"/:id", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
			}
			h := app.Handler()
			var req fasthttp.Request
			req.Header.SetMethod("GET")
			req.SetRequestURI("/wp-admin/setup.php")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, tcpAddr(b, adapterstest.BenchPeer), nil)
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				ctx.ResetUserValues()
				h(&ctx)
				if ctx.Response.StatusCode() != fiber.StatusNotFound {
					b.Fatal(ctx.Response.StatusCode())
				}
			}
		})
	}
}
