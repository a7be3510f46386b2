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
)

func ExampleNew() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: core.Policy{
		Algorithm: core.SlidingWindowCounter, Limit: 10, Window: time.Minute,
	}}})
	if err != nil {
		panic(err)
	}

	app := fiber.New()
	app.Use(fiberlimit.New(flow)) // keyed on the connection's peer IP
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("hello") })

	res, err := app.Test(httptest.NewRequest("GET", "/", nil))
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	// Output: 200 9
}
