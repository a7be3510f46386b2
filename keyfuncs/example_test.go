package keyfuncs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
)

// httpRequest presents a net/http request as a keyfuncs.Request, as the
// chi adapter does.
type httpRequest struct {
	r       *http.Request
	pattern string
}

func (h httpRequest) RemoteAddr() string                { return h.r.RemoteAddr }
func (h httpRequest) Header(name string) string         { return h.r.Header.Get(name) }
func (h httpRequest) HeaderValues(name string) []string { return h.r.Header.Values(name) }
func (h httpRequest) Method() string                    { return h.r.Method }
func (h httpRequest) Route() string                     { return h.pattern }
func (h httpRequest) Unrouted() bool                    { return h.pattern == "" }
func (h httpRequest) Path() string                      { return h.r.URL.Path }
func (h httpRequest) Context() context.Context          { return h.r.Context() }

// By default the client is the socket peer: a forged X-Forwarded-For (or
// X-Real-IP, Forwarded ...) changes nothing.
func ExampleClientIP_Key() {
	client, err := keyfuncs.NewClientIP()
	if err != nil {
		log.Fatal(err)
	}
	key := client.Key // a keyfuncs.Func
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:54321"
	r.Header.Set("X-Forwarded-For", "6.6.6.6")
	r.Header.Set("X-Real-IP", "6.6.6.6")
	fmt.Println(key(httpRequest{r: r}))

	r.RemoteAddr = "[2001:db8:1:1a0::7]:54321" // IPv6: grouped by /56
	fmt.Println(key(httpRequest{r: r}))
	// Output:
	// ip:203.0.113.7 <nil>
	// ip:2001:db8:1:100::/56 <nil>
}

// Behind your own proxies, declare them: X-Forwarded-For is then read,
// from the right, only when the peer is one of them, and entries the
// client wrote to the left of the real client address are ignored.
func ExampleTrustedProxies() {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	key := client.Key
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:54321" // the load balancer
	// The client sent "X-Forwarded-For: 6.6.6.6"; the edge proxy appended
	// the client's real address, the load balancer the edge proxy's.
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.1, 10.0.0.3")
	fmt.Println(key(httpRequest{r: r}))

	r.RemoteAddr = "203.0.113.7:54321" // not a proxy: headers ignored
	fmt.Println(key(httpRequest{r: r}))
	// Output:
	// ip:198.51.100.1 <nil>
	// ip:203.0.113.7 <nil>
}

// A CDN that overwrites a client-address header, trusted only from the
// CDN's own addresses.
func ExampleTrustedHeader() {
	client, err := keyfuncs.NewClientIP(
		keyfuncs.TrustedHeader("CF-Connecting-IP"),
		keyfuncs.TrustedProxies("173.245.48.0/20", "2400:cb00::/32"), // part of https://www.cloudflare.com/ips/
	)
	if err != nil {
		log.Fatal(err)
	}
	key := client.Key
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "173.245.48.1:443"
	r.Header.Set("CF-Connecting-IP", "198.51.100.42")
	fmt.Println(key(httpRequest{r: r}))
	// Output:
	// ip:198.51.100.42 <nil>
}

// RFC 7239 Forwarded instead of X-Forwarded-For.
func ExampleUseForwarded() {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"), keyfuncs.UseForwarded())
	if err != nil {
		log.Fatal(err)
	}
	key := client.Key
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:54321"
	r.Header.Add("Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https`)
	r.Header.Add("Forwarded", "for=10.0.0.3;by=10.0.0.2")
	fmt.Println(key(httpRequest{r: r}))
	// Output:
	// ip:2001:db8:cafe::/56 <nil>
}

// A fallback chain: users by ID, API clients by (hashed) key, the rest by
// IP; combined with the route for per-endpoint limits.
func ExampleFirstOf() {
	type userKey struct{}
	user, err1 := keyfuncs.User(func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(userKey{}).(string) // as your auth middleware stored it
		return id, ok
	})
	apiKey, err2 := keyfuncs.APIKeyHeader("X-API-Key", nil)
	client, err3 := keyfuncs.NewClientIP()
	if err := errors.Join(err1, err2, err3); err != nil {
		log.Fatal(err)
	}
	who, err := keyfuncs.FirstOf(user, apiKey, client.Key)
	if err != nil {
		log.Fatal(err)
	}
	key, err := keyfuncs.Compose(keyfuncs.Route(), who)
	if err != nil {
		log.Fatal(err)
	}

	r := httptest.NewRequest("POST", "/orders", nil)
	r.RemoteAddr = "203.0.113.7:54321"
	fmt.Println(key(httpRequest{r: r, pattern: "/orders"}))

	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "u-42"))
	fmt.Println(key(httpRequest{r: r, pattern: "/orders"}))

	r = httptest.NewRequest("GET", "/no/such/page", nil)
	r.RemoteAddr = "203.0.113.7:54321"
	fmt.Println(key(httpRequest{r: r})) // no route matched
	// Output:
	// route:POST /orders|ip:203.0.113.7 <nil>
	// route:POST /orders|user:u-42 <nil>
	// route:GET <unmatched>|ip:203.0.113.7 <nil>
}

// The raw API key never appears in the rate-limit key; in Authorization,
// the bearer token is the key.
func ExampleAPIKeyHeader_bearer() {
	key, err := keyfuncs.APIKeyHeader("Authorization", nil) // nil: no secret, plain SHA-256
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer sk_live_s3cr3t")
	fmt.Println(key(httpRequest{r: r}))
	// Output:
	// key:84dc88e54a7e636eb5186b026cbe51b2 <nil>
}

// Bad input is a constructor error wrapping core.ErrInvalidOption, never
// a key function that fails later or keys everyone alike.
func ExampleNewClientIP_invalidOption() {
	client, err := keyfuncs.NewClientIP(keyfuncs.Prefixes(32, 0))
	fmt.Println(client == nil, errors.Is(err, core.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true true
	// ratelimit: invalid argument: keyfuncs.NewClientIP: Prefixes(32, 0): want an IPv6 prefix of 1 to 128
}

// A keyed hash: without the secret, a key seen in the store cannot be
// checked against guessed API keys.
func ExampleAPIKeyHeader() {
	key, err := keyfuncs.APIKeyHeader("X-API-Key", []byte("pepper"))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "sk_live_s3cr3t")
	fmt.Println(key(httpRequest{r: r}))
	// Output:
	// key:9162c411dbebce5f8f751b697bb8b395 <nil>
}

// A ClientIP gives the limiter its key and the allow and deny lists the
// address, from one trust model, so that the two never disagree about who
// the client is.
func ExampleNewClientIP() {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:54321" // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 2001:db8:1:1a0::7")
	fmt.Println(client.Addr(httpRequest{r: r}))
	fmt.Println(client.Key(httpRequest{r: r}))
	// Output:
	// 2001:db8:1:1a0::7 <nil>
	// ip:2001:db8:1:100::/56 <nil>
}
