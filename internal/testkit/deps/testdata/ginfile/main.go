// Command ginfile is ginmemory with a deny list read from a watched file.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/access/accessfile"
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
	denied, err := accessfile.Watch("deny.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer denied.Close()
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: core.Policy{
		Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute,
	}}}, httplimit.WithDenyList(denied))
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.New(flow))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	log.Fatal(r.Run("127.0.0.1:8080"))
}
