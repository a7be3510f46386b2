package fiberlimit_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Limit per API key: the options are fiberlimit's own, no other import.
func ExampleWithKeyFunc() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	if err != nil {
		panic(err)
	}

	app := fiber.New()
	app.Use(fiberlimit.New(limiter, fiberlimit.WithKeyFunc(apiKey)))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })

	for _, key := range []string{"alice", "alice", "alice", "bob", ""} {
		fmt.Printf("%q %d\n", key, status(app, "/", key))
	}
	// Output:
	// "alice" 200
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}

// Health checks are not limited: Fiber's Next convention.
func ExampleWithNext() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	health := func(c *fiber.Ctx) bool { return c.Path() == "/health" }

	app := fiber.New()
	app.Use(fiberlimit.New(limiter, fiberlimit.WithNext(health)))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })
	app.Get("/health", func(c *fiber.Ctx) error { return c.SendString("up") })

	for _, path := range []string{"/", "/health", "/", "/health", "/", "/health"} {
		fmt.Println(path, status(app, path, ""))
	}
	// Output:
	// / 200
	// /health 200
	// / 200
	// /health 200
	// / 429
	// /health 200
}

// A key function reads Fiber's own data through Unwrap: here, a route
// parameter. The limiter goes on the route, where the parameter is known.
func ExampleUnwrap() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	perTenant := func(r keyfuncs.Request) (string, error) {
		c, ok := fiberlimit.Unwrap(r)
		if !ok || c.Params("tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + c.Params("tenant"), nil // a copy, safe to keep
	}

	app := fiber.New()
	app.Get("/t/:tenant/items", fiberlimit.New(limiter, fiberlimit.WithKeyFunc(perTenant)),
		func(c *fiber.Ctx) error { return c.SendString("items") })

	for _, path := range []string{"/t/acme/items", "/t/acme/items", "/t/acme/items", "/t/globex/items"} {
		fmt.Println(path, status(app, path, ""))
	}
	// Output:
	// /t/acme/items 200
	// /t/acme/items 200
	// /t/acme/items 429
	// /t/globex/items 200
}

// status sends GET path, with an X-API-Key when apiKey is not empty, and
// returns the response's status.
func status(app *fiber.App, path, apiKey string) int {
	req := httptest.NewRequest("GET", path, nil)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	res, err := app.Test(req)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	return res.StatusCode
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
