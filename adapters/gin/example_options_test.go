package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Limit per API key: the options are ginlimit's own, no other import.
func ExampleWithKeyFunc() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	if err != nil {
		panic(err)
	}

	r := gin.New()
	r.Use(ginlimit.New(limiter, ginlimit.WithKeyFunc(apiKey)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for _, key := range []string{"alice", "alice", "alice", "bob", ""} {
		req := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%q %d\n", key, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}

// A key function reads Gin's own data through Unwrap: here, a route
// parameter.
func ExampleUnwrap() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	perTenant := func(r keyfuncs.Request) (string, error) {
		c, ok := ginlimit.Unwrap(r)
		if !ok || c.Param("tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + c.Param("tenant"), nil
	}

	r := gin.New()
	r.GET("/t/:tenant/items", ginlimit.New(limiter, ginlimit.WithKeyFunc(perTenant)),
		func(c *gin.Context) { c.String(http.StatusOK, "items") })

	for _, path := range []string{"/t/acme/items", "/t/acme/items", "/t/acme/items", "/t/globex/items"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
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
