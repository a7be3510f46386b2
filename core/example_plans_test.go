package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// planOfKey is the context key under which an application's
// authentication middleware puts the client's plan.
type planOfKey struct{}

// plans is a PolicySource: the client's plan comes from the request's
// context, put there by the authentication middleware.
type plans struct{}

// Adjust gives a premium client 1000 a minute.
func (plans) Adjust(ctx context.Context, _ string, p core.Policy) (core.Policy, error) {
	if ctx.Value(planOfKey{}) == "premium" {
		p.Limit = 1000
	}
	return p, nil
}

// Plans are a policy source. A client upgraded to premium keeps what it
// used, and gets the premium room at once.
func ExamplePolicySource() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	l, err := core.NewLimiter(store, []core.Policy{{Name: "user", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}},
		core.WithPolicySource(plans{}))
	if err != nil {
		panic(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC) // time as data: the example never spans a window's end
	free := context.Background()
	premium := context.WithValue(free, planOfKey{}, "premium")
	d, _ := l.AllowN(free, "user:42", 100, at)
	fmt.Println(d.Allowed, d.Remaining, d.Limit)
	d, _ = l.AllowN(free, "user:42", 1, at)
	fmt.Println(d.Allowed, d.Remaining, d.Limit)
	d, _ = l.AllowN(premium, "user:42", 1, at)
	fmt.Println(d.Allowed, d.Remaining, d.Limit)
	// Output:
	// true 0 100
	// false 0 100
	// true 899 1000
}
