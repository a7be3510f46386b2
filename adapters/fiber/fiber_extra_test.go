package fiberlimit_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

func TestNewPanicsOnNilFlow(t *testing.T) {
	adapterstest.CheckPanics(t, "New(nil)", func() { fiberlimit.New(nil) })
}

// TestKeysOutliveTheRequest checks that keys built from request data are
// copies: fasthttp reuses its buffers once a request is done, so a key
// pointing into them would change under the store's feet.
func TestKeysOutliveTheRequest(t *testing.T) {
	var seen []string
	raw := func(r keyfuncs.Request) (string, error) {
		k := r.Header("X-Client") + "|" + r.Method() // Path is documented as valid only during the request
		seen = append(seen, r.Header("X-Client"), r.Method())
		return k, nil
	}
	app := fiber.New()
	app.Use(fiberlimit.New(adapterstest.FixedMount(t, 1, raw).Flow))
	app.All("/*", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })

	for _, q := range []struct{ client, path string }{{"aaaaaaaa", "/first"}, {"bbbbbbbb", "/other"}} {
		req := httptest.NewRequest("PATCH", q.path, nil)
		req.Header.Set("X-Client", q.client)
		res, err := app.Test(req)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode, "status")
	}
	assert.Equal(t, []string{"aaaaaaaa", "PATCH", "bbbbbbbb", "PATCH"}, seen,
		"the values the key function saw, read after both requests")
}

func TestUserAndSkip(t *testing.T) {
	skip := httplimit.WithSkip(func(r keyfuncs.Request) bool {
		c, ok := fiberlimit.Unwrap(r)
		return ok && c.Path() == "/health"
	})
	adapterstest.CheckInvalidKeyFunc(t)(fiberlimit.User(nil))
	adapterstest.CheckInvalidKeyFunc(t)(fiberlimit.User([]string{"user"}))
	// A user stored as a struct is a misconfiguration: 500.
	adapterstest.CheckUserKey(t, adapterstest.MustKeyFunc(t)(fiberlimit.User("user")), skip, fiber.StatusInternalServerError, func(m adapterstest.Mount) adapterstest.App {
		return newApp(func(f *fiber.App) {
			f.Use(func(c *fiber.Ctx) error {
				if id := c.Get(adapterstest.UserHeader); id != "" {
					c.Locals("user", adapterstest.UserValue(id)) // as an authentication middleware would
				}
				return c.Next()
			})
			f.Use(fiberlimit.New(m.Flow))
			f.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
			f.Get("/health", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		})
	})
}

// BenchmarkFiber serves through the app's fasthttp handler with a reused
// RequestCtx, so that only Fiber and the limiter are measured.
func BenchmarkFiber(b *testing.B) {
	adapterstest.Bench(b, func(f *httplimit.Flow) fasthttp.RequestHandler {
		app := fiber.New()
		if f != nil {
			app.Use(fiberlimit.New(f))
		}
		app.Get("/users/:id", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		return app.Handler()
	}, func(b *testing.B, h fasthttp.RequestHandler) {
		benchServe(b, h, benchRequest(b, adapterstest.BenchPath), fiber.StatusOK)
	})
}

// benchRequest is a GET of path from adapterstest.BenchPeer, in a
// RequestCtx for benchServe.
func benchRequest(b *testing.B, path string) *fasthttp.RequestCtx {
	b.Helper()
	var req fasthttp.Request
	req.Header.SetMethod("GET")
	req.SetRequestURI(path)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, tcpAddr(b, adapterstest.BenchPeer), nil)
	return &ctx
}

// benchServe measures h serving ctx again and again, reset between
// requests as fasthttp's server resets it, each answered with status
// want.
func benchServe(b *testing.B, h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, want int) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		ctx.ResetUserValues() // as fasthttp's server does between requests
		h(ctx)
		if ctx.Response.StatusCode() != want {
			b.Fatal(ctx.Response.StatusCode())
		}
	}
}

// BenchmarkFiberDenied measures a denied request: the 429, its
// rate-limit fields and Retry-After (response.Set).
func BenchmarkFiberDenied(b *testing.B) {
	f, err := httplimit.New(adapterstest.NewStore(b), []httplimit.Layer{{Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}}})
	if err != nil {
		b.Fatal(err)
	}
	app := fiber.New()
	app.Use(fiberlimit.New(f))
	app.Get("/users/:id", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	h := app.Handler()
	ctx := benchRequest(b, adapterstest.BenchPath)
	h(ctx) // the one admitted
	benchServe(b, h, ctx, fiber.StatusTooManyRequests)
}

func TestUnwrap(t *testing.T) {
	param := func(r keyfuncs.Request) (string, bool) {
		c, ok := fiberlimit.Unwrap(r)
		if !ok {
			return "", false
		}
		return c.Params("id"), true
	}
	adapterstest.CheckUnwrap(t, param, func(m adapterstest.Mount) adapterstest.App {
		return newApp(func(f *fiber.App) {
			f.Get("/users/:id", fiberlimit.New(m.Flow), func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		})
	})
}
