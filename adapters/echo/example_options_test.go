package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Limit per API key: the layer's Key.
func Example_keyFunc() {
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	if err != nil {
		panic(err)
	}

	flow, closeStore := twoAnHour(apiKey)
	defer closeStore()

	e := echo.New()
	e.Use(echolimit.New(flow))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	for _, key := range []string{"alice", "alice", "alice", "bob", ""} {
		req := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Printf("%q %d\n", key, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}

// Health checks are not limited: httplimit.WithSkip, here with Echo's
// own context (an echo/v4/middleware.Skipper would be called so).
func Example_skip() {
	health := func(c echo.Context) bool { return c.Path() == "/health" }
	skip := httplimit.WithSkip(func(r keyfuncs.Request) bool {
		c, ok := echolimit.Unwrap(r)
		return ok && health(c)
	})

	flow, closeStore := twoAnHour(nil, skip)
	defer closeStore()

	e := echo.New()
	e.Use(echolimit.New(flow))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	e.GET("/health", func(c echo.Context) error { return c.String(http.StatusOK, "up") })

	for _, path := range []string{"/", "/health", "/", "/health", "/", "/health"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// / 200
	// /health 200
	// / 200
	// /health 200
	// / 429
	// /health 200
}

// A key function reads Echo's own data through Unwrap: here, a route
// parameter.
func ExampleUnwrap() {
	perTenant := func(r keyfuncs.Request) (string, error) {
		c, ok := echolimit.Unwrap(r)
		if !ok || c.Param("tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + c.Param("tenant"), nil
	}

	flow, closeStore := twoAnHour(perTenant)
	defer closeStore()

	e := echo.New()
	e.GET("/t/:tenant/items", func(c echo.Context) error { return c.String(http.StatusOK, "items") },
		echolimit.New(flow))

	for _, path := range []string{"/t/acme/items", "/t/acme/items", "/t/acme/items", "/t/globex/items"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /t/acme/items 200
	// /t/acme/items 200
	// /t/acme/items 429
	// /t/globex/items 200
}

// twoAnHour returns a Flow of two requests an hour per key (key nil: per
// address), built as in ExampleNew, and the function that closes its store.
func twoAnHour(key keyfuncs.Func, opts ...httplimit.Option) (*httplimit.Flow, func() error) {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: core.Policy{
		Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Hour,
	}, Key: key}}, opts...)
	if err != nil {
		panic(err)
	}
	return flow, store.Close
}
