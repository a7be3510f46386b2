package fiberlimit_test

import (
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/apigate/ratelimit/adapters/fiber"
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

	app := fiber.New()
	app.Use(fiberlimit.New(flow))
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

// Health checks are not limited: httplimit.WithSkip, here with Fiber's
// own context (a Next function of Fiber's configs would be called so).
func Example_skip() {
	health := func(c *fiber.Ctx) bool { return c.Path() == "/health" }
	skip := httplimit.WithSkip(func(r keyfuncs.Request) bool {
		c, ok := fiberlimit.Unwrap(r)
		return ok && health(c)
	})

	flow, closeStore := twoAnHour(nil, skip)
	defer closeStore()

	app := fiber.New()
	app.Use(fiberlimit.New(flow))
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
	perTenant := func(r keyfuncs.Request) (string, error) {
		c, ok := fiberlimit.Unwrap(r)
		if !ok || c.Params("tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + c.Params("tenant"), nil // a copy, safe to keep
	}

	flow, closeStore := twoAnHour(perTenant)
	defer closeStore()

	app := fiber.New()
	app.Get("/t/:tenant/items", fiberlimit.New(flow),
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
