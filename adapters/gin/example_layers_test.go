package ginlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// plans are a core.PolicySource: a premium user gets 10,000 a minute under
// the user layer, a client moved between plans keeping its usage. Looked
// up by the layer's key here; a source may read the request's context too.
type plans map[string]bool

// Adjust raises the user layer's limit of a premium user.
func (premium plans) Adjust(_ context.Context, key string, p core.Policy) (core.Policy, error) {
	if p.Name == "user" && premium[key] {
		p.Limit = 10_000
	}
	return p, nil
}

// The issue's four layers in one r.Use: a sixth login is denied by the
// login layer, and takes nothing from the user, ip and global layers.
func Example_layers() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	must := func(f keyfuncs.Func, err error) keyfuncs.Func {
		if err != nil {
			panic(err)
		}
		return f
	}
	clientIP, err := keyfuncs.NewClientIP()
	if err != nil {
		panic(err)
	}
	ip := clientIP.Key
	user := must(keyfuncs.FirstOf(must(ginlimit.User("user")), ip)) // c.Set("user", id) by your auth middleware; anonymous: by address
	perMinute := func(name string, n int64) core.Policy {
		return core.Policy{Name: name, Algorithm: core.TokenBucket, Limit: n, Window: time.Minute}
	}
	premium := plans{"user:42": true} // your billing data, in a real API
	search, err := httplimit.CostByRoute(map[string]int64{"GET /search": 5})
	if err != nil {
		panic(err)
	}
	all := headers.Config{XRateLimit: true, Draft6: true, RetryAfter: true}
	all.Structured = true // the draft-10 fields too: they list every layer
	flow, err := httplimit.New(store, []httplimit.Layer{
		{Key: must(keyfuncs.Static("api")), Policy: perMinute("global", 1_000_000)},
		{Key: user, Policy: perMinute("user", 1000), Cost: search},
		{Key: ip, Methods: []string{"POST"}, Routes: []string{"/login"},
			Policy: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute, FailClosed: 5 * time.Second},
			Counts: httplimit.CountFailures}, // failed logins only
		{Key: ip, Policy: perMinute("ip", 300)},
	}, httplimit.WithHeaders(all), httplimit.WithCore(core.WithPolicySource(premium)))
	if err != nil {
		panic(err) // invalid layers fail here, never later
	}

	r := gin.New()
	r.Use(ginlimit.New(flow))
	r.POST("/login", func(c *gin.Context) { c.Status(http.StatusUnauthorized) })
	r.GET("/search", func(c *gin.Context) { c.String(http.StatusOK, "results") })
	srv := httptest.NewServer(r)
	defer srv.Close()

	send := func(method, path string) *http.Response {
		req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, strings.NewReader(""))
		if err != nil {
			panic(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		return res
	}
	for range 6 {
		res := send("POST", "/login")
		fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	}
	res := send("GET", "/search")
	// The ip layer binds (the least left: 300 less 5 logins and this
	// search); the draft-10 RateLimit field lists the three layers that
	// applied, the binding one first.
	rl := res.Header.Get("RateLimit")
	fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), strings.Count(rl, ";r="), strings.HasPrefix(rl, `"ip"`))
	// Output:
	// 401 4
	// 401 3
	// 401 2
	// 401 1
	// 401 0
	// 429 0
	// 200 294 3 true
}
