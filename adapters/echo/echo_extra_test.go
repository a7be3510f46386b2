package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
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
	echolimit.New(nil)
}

func TestNewPanicsOnNilSkipper(t *testing.T) {
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	defer func() {
		if recover() == nil {
			t.Error("New(l, WithSkipper(nil)) did not panic")
		}
	}()
	echolimit.New(l, echolimit.WithSkipper(nil))
}

func TestUserFromContextAndSkipper(t *testing.T) {
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	var keys []string
	user := echolimit.UserFromContext("user")
	key := func(r keyfuncs.Request) (string, error) {
		k, err := user(r)
		keys = append(keys, k)
		return k, err
	}
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if id := c.Request().Header.Get("X-Test-User"); id != "" {
				c.Set("user", id) // as an authentication middleware would
			}
			return next(c)
		}
	})
	e.Use(echolimit.New(l,
		middleware.WithKeyFunc(key),
		middleware.WithErrorHandler(func(keyfuncs.Request, error) {}),
		echolimit.WithSkipper(func(c echo.Context) bool { return c.Path() == "/health" }),
	))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/health", func(c echo.Context) error { return c.NoContent(http.StatusOK) })

	do := func(path, user string) int {
		req := httptest.NewRequest("GET", path, nil)
		if user != "" {
			req.Header.Set("X-Test-User", user)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code
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

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func BenchmarkEcho(b *testing.B) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: core.MaxLimit, Window: time.Hour}
	for _, withLimiter := range []bool{false, true} {
		name := "NoLimiter"
		e := echo.New()
		if withLimiter {
			name = "Limiter"
			l, err := core.NewLimiter(adapterstest.NewStore(b), p)
			if err != nil {
				b.Fatal(err)
			}
			e.Use(echolimit.New(l))
		}
		e.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/users/1", nil)
			req.RemoteAddr = "203.0.113.7:51234"
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				e.ServeHTTP(w, req)
			}
		})
	}
}
