package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
)

// A token bucket of 100 requests per minute with bursts of 20, shared by
// every app server that reaches the same Redis. The client lets the
// Limiter's deadline reach the socket and gives up on a slow Redis
// quickly; the Limiter bounds each decision to 100ms regardless, and fails
// open.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true,
		ReadTimeout:           200 * time.Millisecond,
		WriteTimeout:          200 * time.Millisecond,
	})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.WithPrefix("myapp:rl:"), redisstore.WithTimeout(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(store, []core.Policy{{
		Name:      "api",
		Algorithm: core.TokenBucket,
		Limit:     100,
		Window:    time.Minute,
		Burst:     20,
	}})

	if err != nil {
		log.Fatal(err)
	}

	d, err := limiter.AllowN(context.Background(), "203.0.113.7", 1, time.Time{})
	if err != nil {
		// A Redis outage: d is the fail-open decision; log and go on.
		log.Print(err)
	}
	if !d.Allowed {
		fmt.Printf("429, retry in %v\n", d.RetryAfter)
		return
	}
	fmt.Printf("allowed, %d of %d left\n", d.Remaining, d.Limit)
}
