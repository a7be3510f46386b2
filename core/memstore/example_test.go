package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

func Example() {
	store, err := memstore.New(memstore.WithMaxKeys(1_000_000))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	limiter, err := core.NewLimiter(store, []core.Policy{{
		Name:      "api",
		Algorithm: core.TokenBucket,
		Limit:     3,
		Window:    time.Minute,
	}})

	if err != nil {
		panic(err)
	}
	for range 4 {
		d, err := limiter.AllowN(context.Background(), "203.0.113.7", 1, time.Time{})
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}
