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

	r := gin.New()
	r.Use(ginlimit.New(flow)) // keyed on the socket peer's IP
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	srv := httptest.NewServer(r) // a real socket: the peer is 127.0.0.1
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	// Output: 200 9
}
