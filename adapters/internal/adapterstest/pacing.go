package adapterstest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

func itoa(n int) string { return strconv.Itoa(n) }

// watchedContext is a context that reports, once, the first time a caller
// starts waiting on it (calls Done).
type watchedContext struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *watchedContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// guard fails the test if done is not closed in time: a stuck request,
// not a timing assumption.
var guard = testwait.D(10 * time.Second)

// RunPacing checks the leaky bucket's Delay: an admitted request waits it
// before its handler runs (up to WithMaxDelay), and a request whose context
// ends while waiting never reaches its handler.
func RunPacing(t *testing.T, h Harness) {
	leaky := func(limit int64, window time.Duration) core.Policy {
		return core.Policy{Name: "leaky", Algorithm: core.LeakyBucket, Limit: limit, Window: window, Burst: 3}
	}

	t.Run("waits the delay", func(t *testing.T) {
		// 20 per second: each queued unit delays the next by 50ms.
		spec := global(t, NewStore(t), leaky(20, time.Second), nil)
		app := h.Build(t, spec)
		require.Equal(t, 200, app.Do(t, get(peerA)).Status, "first request: status")
		start := time.Now()
		res := app.Do(t, get(peerA))
		require.Equal(t, 200, res.Status, "second request: status")
		require.Equal(t, Body, res.Body, "second request: body")
		assert.GreaterOrEqual(t, spec.lastServed().Sub(start), 50*time.Millisecond, "time from the request to its handler")
		assert.Equal(t, int64(2), spec.Hits(), "handler runs")
	})

	t.Run("capped by MaxDelay", func(t *testing.T) {
		// One per hour: the second request's Delay is an hour, cut to 30ms.
		spec := global(t, NewStore(t), leaky(1, time.Hour), nil, httplimit.WithMaxDelay(30*time.Millisecond))
		app := h.Build(t, spec)
		app.Do(t, get(peerA))
		start := time.Now()
		done := make(chan Response, 1)
		go func() { done <- app.Do(t, get(peerA)) }()
		select {
		case res := <-done:
			require.Equal(t, 200, res.Status, "status")
		case <-time.After(guard):
			require.Fail(t, "request still held; MaxDelay not applied")
		}
		assert.GreaterOrEqual(t, spec.lastServed().Sub(start), 30*time.Millisecond, "time from the request to its handler")
	})

	t.Run("stops when the context ends", func(t *testing.T) {
		spec := global(t, NewStore(t), leaky(1, time.Hour), nil, httplimit.WithMaxDelay(time.Hour))
		app := h.Build(t, spec)
		app.Do(t, get(peerA))

		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx := &watchedContext{Context: parent, waiting: make(chan struct{})}
		req := get(peerA)
		req.Context = ctx
		done := make(chan struct{})
		go func() {
			defer close(done)
			res := app.Do(t, req)
			assert.NotEqual(t, Body, res.Body, "the handler answered after the context ended")
		}()
		select {
		case <-ctx.waiting:
		case <-time.After(guard):
			require.Fail(t, "the request never waited on its context")
		}
		cancel()
		select {
		case <-done:
		case <-time.After(guard):
			require.Fail(t, "request still held after its context ended")
		}
		assert.Equal(t, int64(1), spec.Hits(), "handler runs: the first request only")
	})
}
