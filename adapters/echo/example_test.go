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

	e := echo.New()
	e.Use(echolimit.New(flow)) // keyed on the socket peer's IP
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	srv := httptest.NewServer(e) // a real socket: the peer is 127.0.0.1
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	// Output: 200 9
}
