package adapterstest

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// RunLayersOutage serves the issue's layers over a Redis of their own,
// with a default go-redis client, the login layer failing closed on a
// Limiter that fails open, and checks over real sockets what clients get
// while Redis is frozen, then dead: every request answered within the
// Limiter's timeout; GET /items passes without a rate-limit header (the
// store told nothing); POST /login gets 503 with Retry-After (the login
// layer's fail-closed retry), never reaching its handler. Once Redis is
// back, the layers decide again.
func RunLayersOutage(t *testing.T, h SocketHarness) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a redis-server of its own to freeze and kill")
	}
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	const timeout = 100 * time.Millisecond
	store, err := redisstore.New(client, redisstore.WithTimeout(timeout))
	require.NoError(t, err)
	layers := IssueLayers(t)
	for i := range layers {
		if layers[i].Policy.Name == "login" {
			layers[i].Policy.FailClosed = time.Second
		}
	}
	errs := new(errorRecorder)
	f := NewFlow(t, store, layers, []core.Option{core.WithCircuitBreaker(0, time.Second), core.WithPolicySource(IssuePlans{})},
		httplimit.WithHeaders(layersHeaders), errs.option())
	spec := &Spec{
		Authenticate: Authenticate,
		Global:       []Mount{{Flow: f}},
		Routes:       layersRoutes,
	}
	a := &layersApp{addr: h.Serve(t, spec), limiter: f.Limiter(), spec: spec, errs: errs}

	// Healthy: the layers decide. The timeout under test is short, and on
	// a busy machine a healthy round trip (the first one dials and loads
	// the script) may outlast it and fail open: the healthy step is a
	// warm-up, polled with a generous deadline, not a one-shot request.
	require.Eventually(t, func() bool {
		res := a.send(t, "GET", "/items", "X-User", "o")
		return res.Status == http.StatusOK && res.Header.Get("X-RateLimit-Remaining") != ""
	}, limitertest.StoreTimeout, 10*time.Millisecond, "healthy: the layers decide")
	healthyErrs := len(errs.all())

	for _, phase := range []struct {
		name string
		cut  func()
	}{{"frozen", srv.Freeze}, {"dead", func() { srv.Thaw(); srv.Kill() }}} {
		t.Run(phase.name, func(t *testing.T) {
			phase.cut()
			hits := spec.Hits()
			start := time.Now()
			res := a.send(t, "GET", "/items", "X-User", "o")
			assert.Less(t, time.Since(start), timeout+testwait.D(2*time.Second), "bounded by the timeout (and a busy machine's delays)")
			assert.Equal(t, http.StatusOK, res.Status, "GET /items fails open")
			assert.Empty(t, res.Header.Get("X-RateLimit-Remaining"), "no header: the store told nothing")
			assert.Equal(t, hits+1, spec.Hits())

			start = time.Now()
			res = a.send(t, "POST", "/login", "X-User", "o")
			assert.Less(t, time.Since(start), timeout+testwait.D(2*time.Second), "bounded by the timeout (and a busy machine's delays)")
			assert.Equal(t, http.StatusServiceUnavailable, res.Status, "the login layer fails closed")
			assert.Equal(t, "1", res.Header.Get("Retry-After"), "the fail-closed retry")
			assert.Equal(t, hits+1, spec.Hits(), "the login handler never ran")
		})
	}
	srv.Restart()
	require.Eventually(t, func() bool {
		res := a.send(t, "POST", "/login", "X-User", "o")
		return res.Status == http.StatusOK && res.Header.Get("X-RateLimit-Remaining") != ""
	}, testwait.D(10*time.Second), 50*time.Millisecond, "Redis back: the layers decide again")
	assert.Greater(t, len(errs.all()), healthyErrs, "the error handler heard the outage")
}
