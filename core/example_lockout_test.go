package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// A login guard: 5 attempts per 15 minutes, then locked out for 30
// minutes, an hour at the next offence, and so on up to a day. Times are
// explicit (AllowAt) to show the sequence; a server calls Allow.
func ExamplePolicy_lockout() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	login, err := core.NewLimiter(store, []core.Policy{{
		Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
		Lockout: 30 * time.Minute, LockoutMax: 24 * time.Hour,
	}})

	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	attempt := func(at time.Duration) {
		d, err := login.AllowN(ctx, "user:alice", 1, t0.Add(at))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-6v allowed=%-5v locked_out=%-5v retry_after=%v\n", at, d.Allowed, d.LockedOut, d.RetryAfter)
	}
	for i := range 6 {
		attempt(time.Duration(i) * time.Minute)
	}
	attempt(20 * time.Minute) // still locked out
	attempt(35 * time.Minute) // the lockout is over, the window has moved on
	for range 4 {
		attempt(36 * time.Minute)
	}
	attempt(37 * time.Minute) // a second offence: an hour
	// A good login forgives: Reset clears the strikes and the lockout.
	if err := login.Reset(ctx, "user:alice"); err != nil {
		panic(err)
	}
	attempt(38 * time.Minute)
	// Output:
	// 0s     allowed=true  locked_out=false retry_after=0s
	// 1m0s   allowed=true  locked_out=false retry_after=0s
	// 2m0s   allowed=true  locked_out=false retry_after=0s
	// 3m0s   allowed=true  locked_out=false retry_after=0s
	// 4m0s   allowed=true  locked_out=false retry_after=0s
	// 5m0s   allowed=false locked_out=true  retry_after=30m0s
	// 20m0s  allowed=false locked_out=true  retry_after=15m0s
	// 35m0s  allowed=true  locked_out=false retry_after=0s
	// 36m0s  allowed=true  locked_out=false retry_after=0s
	// 36m0s  allowed=true  locked_out=false retry_after=0s
	// 36m0s  allowed=true  locked_out=false retry_after=0s
	// 36m0s  allowed=true  locked_out=false retry_after=0s
	// 37m0s  allowed=false locked_out=true  retry_after=1h0m0s
	// 38m0s  allowed=true  locked_out=false retry_after=0s
}

// Shadow mode tries a policy on live traffic: nothing is denied, and the
// requests that would have been are marked.
func ExampleWithShadow() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	l, err := core.NewLimiter(store, []core.Policy{{Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute}}, core.WithShadow())
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		d, err := l.AllowN(context.Background(), "203.0.113.7", 1, t0)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v shadowed=%v retry_after=%v\n", d.Allowed, d.Shadowed, d.RetryAfter)
	}
	// Output:
	// allowed=true shadowed=false retry_after=0s
	// allowed=true shadowed=false retry_after=0s
	// allowed=true shadowed=true retry_after=1m0s
}

// The HTTP flow decides allow- and deny-listed clients without the
// Limiter, and tells its observers with Observe.
func ExampleLimiter_Observe() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	l, err := core.NewLimiter(store, []core.Policy{{Name: "api", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute}},
		core.WithObserver(printer{}))
	if err != nil {
		panic(err)
	}
	_ = l.Observe("10.0.0.1", 1, true)
	_ = l.Observe("198.51.100.9", 1, false)
	fmt.Println(l.Observe("", 1, true))
	// Output:
	// api 10.0.0.1 list allowed=true
	// api 198.51.100.9 list allowed=false
	// ratelimit: invalid argument: empty key
}

// printer is an Observer that prints every Event.
type printer struct{}

func (printer) Bind(*core.Limiter) (func(core.Event), error) {
	return func(e core.Event) {
		fmt.Printf("%s %s %s allowed=%v\n", e.Policy.Name, e.Key, e.Source, e.Allowed)
	}, nil
}
