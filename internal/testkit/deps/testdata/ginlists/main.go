// Command ginlists is ginmemory with an allow list built in code.
package main

import (
	"log"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/access"
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
	office, err := access.NewList(access.Entry{Prefix: netip.MustParsePrefix("198.51.100.0/24")})
	if err != nil {
		log.Fatal(err)
	}
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: core.Policy{
		Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute,
	}}}, httplimit.WithAllowList(office))
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(flow))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	log.Fatal(r.Run("127.0.0.1:8080"))
}
