package rediswatch_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/overrides"
	"github.com/apigate/ratelimit/rediswatch"
)

// Every app server runs an Overrides of the same hash as its Limiter's
// policy source; an operator's Put on any of them, or an HSET with
// redis-cli, changes the limit on all of them within a second. (It needs
// a Redis on localhost:6379, so it has no output to check.)
func ExampleNewOverrides() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := rediswatch.NewOverrides(ctx, client)
	if err != nil {
		fmt.Println(err) // Redis unreachable: no overrides to start with
		return
	}
	defer w.Close()
	limiter, err := core.NewLimiter(store, []core.Policy{
		{Name: "api", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute}},

		core.WithPolicySource(w))

	if err != nil {
		fmt.Println(err)
		return
	}

	// An incident: halve the api limit on every server.
	if err := w.Put(ctx, "api", overrides.Override{Scale: 0.5}); err != nil {
		fmt.Println(err)
		return
	}
	d, err := limiter.AllowN(ctx, "user:42", 1, time.Time{})
	fmt.Println(d.Limit, err) // 500 here at once; elsewhere within a poll interval

	// Over: lift it.
	_ = w.Delete(ctx, "api")
}
