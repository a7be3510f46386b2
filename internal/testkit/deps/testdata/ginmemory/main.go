// Command ginmemory is a Gin application limited on the memory store,
// without lists or Redis: what its build may compile is checked by
// package deps.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	ginlimit "github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
)

func main() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: core.Policy{
		Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute,
	}}})
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(flow))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	log.Fatal(r.Run("127.0.0.1:8080"))
}
