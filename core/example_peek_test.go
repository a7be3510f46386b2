package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// A peek tells where a client stands under each layer without spending:
// what a quota endpoint shows. The next decision starts from it.
func ExampleLimiter_Peek() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	l, err := core.NewLimiter(store, []core.Policy{
		{Name: "api", Algorithm: core.FixedWindow, Limit: 100, Window: time.Hour},
		{Name: "export", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	checks := []core.Request{{Key: "user-42", Cost: 1}, {Key: "user-42", Cost: 4}}
	if _, _, err := l.AllowLayers(ctx, now, checks, nil); err != nil {
		panic(err)
	}
	quota := make([]core.Decision, len(checks))
	for range 3 { // peeks spend nothing
		if err := l.Peek(ctx, now, checks, quota); err != nil {
			panic(err)
		}
	}
	for _, q := range quota {
		fmt.Printf("%s: %d of %d left, whole again in %v\n", q.Policy.Name, q.Remaining, q.Limit, q.ResetAfter)
	}
	// Output:
	// api: 99 of 100 left, whole again in 1h0m0s
	// export: 6 of 10 left, whole again in 1h0m0s
}
