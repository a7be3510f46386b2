package overrides_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/overrides"
)

// An operator halves the search layer's limit during an incident, then
// lifts the override: each change takes effect on the next request.
func ExampleSet() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	live := overrides.New()
	l, err := core.NewLimiter(store, []core.Policy{
		{Name: "search", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute},
	}, core.WithPolicySource(live))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d, _ := l.AllowN(ctx, "user:42", 6, now)
	fmt.Println("6 of 10:", d.Allowed, d.Remaining)

	o, err := overrides.Parse("scale=0.5")
	if err != nil {
		panic(err)
	}
	if err := live.Put("search", o); err != nil {
		panic(err)
	}
	d, _ = l.AllowN(ctx, "user:42", 1, now)
	fmt.Println("halved to", d.Limit, "allowed:", d.Allowed)

	live.Delete("search")
	d, _ = l.AllowN(ctx, "user:42", 1, now)
	fmt.Println("lifted:", d.Allowed, d.Remaining)
	// Output:
	// 6 of 10: true 4
	// halved to 5 allowed: false
	// lifted: true 3
}

// Limits shrink while more than 100 requests are in flight, and recover
// once fewer than 50 are.
func ExampleNewLoad() {
	var inflight atomic.Int64 // Add(1) when a request starts, defer Add(-1)
	signal := func() float64 { return float64(inflight.Load()) }
	load, err := overrides.NewLoad(signal, overrides.LoadConfig{High: 100, Low: 50, Interval: time.Second})
	if err != nil {
		panic(err)
	}
	defer load.Close() // stops the goroutine that reads the signal every second
	// core.NewLimiter(store, policies, core.WithPolicySource(load)) ...
	inflight.Add(150)
	fmt.Println(load.Update()) // an Update now, as the ticker's would be
	// Output: 0.9
}
