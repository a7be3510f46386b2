package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
)

func ExamplePolicy_Validate() {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute, Burst: 10}
	fmt.Println(p.Validate())
	p.Burst = 0
	fmt.Println(p.Validate())
	// Output:
	// ratelimit: invalid argument: policy: burst applies to token_bucket and leaky_bucket only, not fixed_window
	// <nil>
}

func ExampleNewLimiter_invalidPolicy() {
	_, err := core.NewLimiter(&fakeStore{}, []core.Policy{{Algorithm: core.TokenBucket, Limit: 0, Window: time.Second}})
	fmt.Println(err)
	// Output:
	// ratelimit: invalid argument: policy: limit 0 is out of range [1, 1000000000000]
}

func ExampleLimiter_AllowN_failOpen() {
	// A store that is down: a policy fails open by default (FailClosed
	// 0): the request passes and the Decision says why, its Err there to
	// be logged. The call's own error is nil, since a decision was made,
	// so that the usual err check does not refuse it. (The store is
	// called directly, so that the example's output never depends on the
	// Limiter's timeout on a busy machine.)
	down := directStore{&fakeStore{err: fmt.Errorf("dial tcp 127.0.0.1:6379: connection refused")}}
	l, _ := core.NewLimiter(down, []core.Policy{{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}})
	d, err := l.AllowN(context.Background(), "client-1", 2, time.Time{})
	fmt.Println(d.Allowed, d.Source, err)
	fmt.Println(d.Err)
	// Output:
	// true fail-mode <nil>
	// ratelimit: store failed: dial tcp 127.0.0.1:6379: connection refused
}

func ExampleLimiter_Health() {
	// A store that is down: after three consecutive failures the circuit
	// breaker opens, and decisions no longer wait for the store.
	down := directStore{&fakeStore{err: errors.New("dial tcp 127.0.0.1:6379: connection refused")}}
	l, _ := core.NewLimiter(down, []core.Policy{{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, FailClosed: time.Second}})

	for range 3 {
		_, _ = l.AllowN(context.Background(), "client-1", 1, time.Time{})
	}
	fmt.Println(l.Health())
	d, err := l.AllowN(context.Background(), "client-1", 1, time.Time{})
	fmt.Println(d.Allowed, d.Source, err, len(down.reqs))
	fmt.Println(d.Err)
	// Output:
	// failing
	// false fail-mode <nil> 3
	// ratelimit: store failed: ratelimit: circuit breaker open
}
