package headers_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
)

func ExampleWriter_Write() {
	policy := core.Policy{Name: "api", Algorithm: core.SlidingWindowCounter, Limit: 100, Window: time.Minute}
	d := core.Decision{
		Allowed:    false,
		Limit:      100,
		Remaining:  0,
		ResetAfter: 12500 * time.Millisecond,
		RetryAfter: 600 * time.Millisecond,
		Policy:     policy,
	}
	now := time.Unix(1_700_000_000, 0)

	cfg := headers.Config{XRateLimit: true, Draft6: true, RetryAfter: true}
	cfg.Structured = true
	w := headers.NewWriter(cfg) // one for every response
	h := http.Header{}
	w.Write(h, d, nil, now) // nil: a single limit, no other layer

	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// Ratelimit: "api";r=0;t=13
	// Ratelimit-Limit: 100
	// Ratelimit-Policy: "api";q=100;w=60
	// Ratelimit-Remaining: 0
	// Ratelimit-Reset: 13
	// Retry-After: 1
	// X-Ratelimit-Limit: 100
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Reset: 1700000013
}

func ExampleParse() {
	h := http.Header{}
	h.Set("RateLimit", `"api";r=7;t=30`)
	h.Set("RateLimit-Policy", `"api";q=100;w=60`)
	h.Set("Retry-After", "5")

	layers, err := headers.Parse(h)
	if err != nil {
		fmt.Println(err)
		return
	}
	d := layers[0] // the binding layer
	fmt.Printf("%s: %d left of %d per %v, whole again in %v; retry in %v\n",
		d.Policy.Name, d.Remaining, d.Policy.Limit, d.Policy.Window, d.ResetAfter, d.RetryAfter)

	h.Set("Retry-After", "-5")
	_, err = headers.Parse(h)
	fmt.Println(err)
	// Output:
	// api: 7 left of 100 per 1m0s, whole again in 30s; retry in 5s
	// headers: malformed rate-limit field: Retry-After: neither delay seconds nor an HTTP-date: "-5"
}
