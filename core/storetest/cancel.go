package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// promptBound is how soon a store must return once its caller's context
// has ended: far more than a healthy call takes on a loaded machine, far
// less than a hung one would. It is scaled by RATELIMIT_TEST_TIMESCALE
// (internal/testkit/testwait), as every deadline of the module's tests is.
var promptBound = testwait.D(2 * time.Second)

// testPromptCancel checks that a store returns promptly once its caller's
// context ends (a Limiter waits for its store on the caller's goroutine,
// and bounds it no other way): Take of one and of two requests, Peek,
// Refund and Reset with a context ended before the call, and Take with one that ends while it runs. Each
// either decides (a store that never blocks, such as memstore, may ignore
// ctx) or fails with an error wrapping the context's.
func testPromptCancel(t tester, store core.Store, run string) {
	p := core.Policy{Name: "cancel", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}
	req := core.Request{Key: run + "-cancel", Policy: p, Cost: 1}
	check := func(what string, call func(ctx context.Context) error, ctx context.Context) {
		t.Helper()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s with an ended context: %v, want nil or an error wrapping context.Canceled", what, err)
			}
		case <-time.After(promptBound):
			t.Fatalf("%s did not return within %v of its context's end (started %v ago)", what, promptBound, time.Since(start))
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	take := func(ctx context.Context) error { _, _, err := storecall.Take(store, ctx, time.Time{}, req); return err }
	check("Take", take, ended)
	check("Reset", func(ctx context.Context) error { return store.Reset(ctx, req.Key, p) }, ended)
	q := p
	q.Name = "cancel-2"
	reqs := []core.Request{req, {Key: req.Key, Policy: q, Cost: 1}}
	check("Take of two", func(ctx context.Context) error {
		_, err := store.Take(ctx, time.Time{}, reqs, make([]core.Decision, 2))
		return err
	}, ended)
	check("Peek", func(ctx context.Context) error { return store.Peek(ctx, time.Time{}, reqs, make([]core.Decision, 2)) }, ended)
	check("Refund", func(ctx context.Context) error { return store.Refund(ctx, epoch(), reqs) }, ended)
	// A context that ends while the store works.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(time.Millisecond); cancel() }()
	check("Take", take, ctx)
}
