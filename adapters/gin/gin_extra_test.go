package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
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
	ginlimit.New(nil)
}

func TestUserFromContext(t *testing.T) {
	l := adapterstest.NewLimiter(t, adapterstest.NewStore(t), core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	var keys []string
	user := ginlimit.UserFromContext("user")
	key := func(r keyfuncs.Request) (string, error) {
		k, err := user(r)
		keys = append(keys, k)
		return k, err
	}
	e := gin.New()
	e.Use(func(c *gin.Context) {
		if id := c.GetHeader("X-Test-User"); id != "" {
			c.Set("user", id) // as an authentication middleware would
		}
	})
	e.Use(ginlimit.New(l, middleware.WithKeyFunc(key), middleware.WithErrorHandler(func(keyfuncs.Request, error) {})))
	e.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })

	do := func(user string) int {
		req := httptest.NewRequest("GET", "/", nil)
		if user != "" {
			req.Header.Set("X-Test-User", user)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code
	}
	if got := []int{do("alice"), do("alice"), do("bob"), do("")}; got[0] != 200 || got[1] != 429 || got[2] != 200 || got[3] != 400 {
		t.Errorf("statuses %v, want [200 429 200 400]", got)
	}
	if keys[0] != "user:alice" || keys[2] != "user:bob" {
		t.Errorf("keys %q", keys)
	}
}

// discard is a ResponseWriter that keeps nothing but its header map,
// cleared before each request, so benchmarks measure the framework.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func BenchmarkGin(b *testing.B) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: core.MaxLimit, Window: time.Hour}
	for _, withLimiter := range []bool{false, true} {
		name := "NoLimiter"
		e := gin.New()
		if withLimiter {
			name = "Limiter"
			l, err := core.NewLimiter(adapterstest.NewStore(b), p)
			if err != nil {
				b.Fatal(err)
			}
			e.Use(ginlimit.New(l))
		}
		e.GET("/users/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
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
