package fiberlimit_test

import (
	"net"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/middleware"
)

func TestNewPanicsOnNilLimiter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil) did not panic")
		}
	}()
	fiberlimit.New(nil)
}

func TestNewPanicsOnNilNext(t *testing.T) {
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	defer func() {
		if recover() == nil {
			t.Error("New(l, WithNext(nil)) did not panic")
		}
	}()
	fiberlimit.New(l, fiberlimit.WithNext(nil))
}

// TestKeysOutliveTheRequest checks that keys built from request data are
// copies: fasthttp reuses its buffers once a request is done, so a key
// pointing into them would change under the store's feet.
func TestKeysOutliveTheRequest(t *testing.T) {
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	var seen []string
	raw := func(r keyfuncs.Request) (string, error) {
		k := r.Header("X-Client") + "|" + r.Query("q") + "|" + r.Method()
		seen = append(seen, r.Header("X-Client"), r.Query("q"), r.Method())
		return k, nil
	}
	app := fiber.New()
	app.Use(fiberlimit.New(l, middleware.WithKeyFunc(raw)))
	app.All("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })

	req := httptest.NewRequest("PATCH", "/?q=first", nil)
	req.Header.Set("X-Client", "aaaaaaaa")
	if res, err := app.Test(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("%v %v", res, err)
	}
	req = httptest.NewRequest("PATCH", "/?q=other", nil)
	req.Header.Set("X-Client", "bbbbbbbb")
	if res, err := app.Test(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("%v %v", res, err)
	}
	if want := []string{"aaaaaaaa", "first", "PATCH", "bbbbbbbb", "other", "PATCH"}; !slices.Equal(seen, want) {
		t.Errorf("values %q, want %q", seen, want)
	}
}

func TestUserFromLocalsAndNext(t *testing.T) {
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	var keys []string
	user := fiberlimit.UserFromLocals("user")
	key := func(r keyfuncs.Request) (string, error) {
		k, err := user(r)
		keys = append(keys, k)
		return k, err
	}
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		if id := c.Get("X-Test-User"); id != "" {
			c.Locals("user", id) // as an authentication middleware would
		}
		return c.Next()
	})
	app.Use(fiberlimit.New(l,
		middleware.WithKeyFunc(key),
		middleware.WithErrorHandler(func(keyfuncs.Request, error) {}),
		fiberlimit.WithNext(func(c *fiber.Ctx) bool { return c.Path() == "/health" }),
	))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	app.Get("/health", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })

	do := func(path, user string) int {
		req := httptest.NewRequest("GET", path, nil)
		if user != "" {
			req.Header.Set("X-Test-User", user)
		}
		res, err := app.Test(req)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode
	}
	got := []int{do("/", "alice"), do("/", "alice"), do("/", "bob"), do("/", ""), do("/health", ""), do("/health", "")}
	want := []int{200, 429, 200, 400, 200, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	if len(keys) != 4 || keys[0] != "user:alice" || keys[2] != "user:bob" {
		t.Errorf("keys %q", keys)
	}
}

// BenchmarkFiber serves through the app's fasthttp handler with a reused
// RequestCtx, so that only Fiber and the limiter are measured.
func BenchmarkFiber(b *testing.B) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: core.MaxLimit, Window: time.Hour}
	for _, withLimiter := range []bool{false, true} {
		name := "NoLimiter"
		app := fiber.New()
		if withLimiter {
			name = "Limiter"
			l, err := core.NewLimiter(adapterstest.NewStore(b), p)
			if err != nil {
				b.Fatal(err)
			}
			app.Use(fiberlimit.New(l))
		}
		app.Get("/users/:id", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
		h := app.Handler()
		b.Run(name, func(b *testing.B) {
			var req fasthttp.Request
			req.Header.SetMethod("GET")
			req.SetRequestURI("/users/1")
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}, nil)
			b.ReportAllocs()
			for b.Loop() {
				ctx.Response.Reset()
				h(&ctx)
				if ctx.Response.StatusCode() != fiber.StatusOK {
					b.Fatal(ctx.Response.StatusCode())
				}
			}
		})
	}
}
