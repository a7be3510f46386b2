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
	"github.com/apigate/ratelimit/keyfuncs"
)

// Limit per API key: the options are echolimit's own, no other import.
func ExampleWithKeyFunc() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(echolimit.New(limiter, echolimit.WithKeyFunc(apiKey)))
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

// Health checks are not limited: an echo/v4/middleware.Skipper works as
// it is.
func ExampleWithSkipper() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	health := func(c echo.Context) bool { return c.Path() == "/health" }

	e := echo.New()
	e.Use(echolimit.New(limiter, echolimit.WithSkipper(health)))
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
	limiter, closeStore := twoAnHour()
	defer closeStore()
	perTenant := func(r keyfuncs.Request) (string, error) {
		c, ok := echolimit.Unwrap(r)
		if !ok || c.Param("tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + c.Param("tenant"), nil
	}

	e := echo.New()
	e.GET("/t/:tenant/items", func(c echo.Context) error { return c.String(http.StatusOK, "items") },
		echolimit.New(limiter, echolimit.WithKeyFunc(perTenant)))

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

// twoAnHour returns a limiter of two requests an hour per key, built as in
// ExampleNew, and the function that closes its store.
func twoAnHour() (*core.Limiter, func() error) {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(store, core.Policy{
		Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Hour,
	})
	if err != nil {
		panic(err)
	}
	return limiter, store.Close
}
