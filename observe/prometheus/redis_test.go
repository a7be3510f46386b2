package promlimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// tally counts what callers of a Limiter saw, as the metrics should.
type tally struct {
	outcomes map[string]float64
	errors   map[string]float64
}

func newTally() *tally {
	return &tally{outcomes: outcomes(), errors: map[string]float64{
		outcome.StoreErrTimeout: 0, outcome.StoreErrCircuitOpen: 0, outcome.StoreErrFailed: 0,
	}}
}

// allow decides one request now and counts it by what it returned.
func (c *tally) allow(t *testing.T, l *core.Limiter, key string) (core.Decision, error) {
	t.Helper()
	return c.allowAt(t, l, key, time.Time{})
}

// allowAt decides one request at the time at (a zero at is now) and
// counts it by what it returned.
func (c *tally) allowAt(t *testing.T, l *core.Limiter, key string, at time.Time) (core.Decision, error) {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, 1, at)
	require.NoError(t, err, "a decision is made, whatever the store does")
	if d.Err != nil {
		require.ErrorIs(t, d.Err, limits.ErrStore)
		c.errors[outcome.StoreErrorKind(d.Err)]++
	}
	outcome := "denied"
	switch {
	case d.Source == core.SourceFallback && d.Allowed:
		outcome = "fallback_allowed"
	case d.Source == core.SourceFallback:
		outcome = "fallback_denied"
	case d.Source == core.SourceFailMode && d.Allowed:
		outcome = "failed_open"
	case d.Source == core.SourceFailMode:
		outcome = "failed_closed"
	case d.Allowed:
		outcome = "allowed"
	}
	c.outcomes[outcome]++
	return d, err
}

// check compares the metrics of limit with the tally.
func (c *tally) check(t *testing.T, reg prometheus.Gatherer, limit, phase string) {
	t.Helper()
	assert.Equal(t, c.outcomes, decisions(t, reg, limit), "%s: decisions by outcome", phase)
	errs := map[string]float64{}
	for k, v := range series(t, reg, "ratelimit_store_errors_total") {
		errs[k] = v
	}
	for kind, n := range c.errors {
		assert.Equal(t, n, errs["kind="+kind+",limit="+limit], "%s: store errors of kind %s", phase, kind)
	}
}

// TestRedisOutage observes a Limiter over a real redis-server that is
// frozen (SIGSTOP: every call times out), then killed (connections
// refused), each time brought back: every decision counted by outcome,
// every failure by kind, the health gauge following healthy, failing,
// recovering, healthy.
func TestRedisOutage(t *testing.T) {
	srv := redistest.StartWith(t) // of its own: it freezes and kills it
	opts := srv.Options()
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	// Redial a refused connection at once, so that a killed server is an
	// error, not a wait until the timeout.
	opts.DialerRetryBackoff = func(int) time.Duration { return 0 }
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	// The timeout under test: the healthy decisions are checked one by one
	// (an exact count), so none may outlast it, which a warm round trip to
	// a live Redis does not do in a second, even on a busy machine, as it
	// might in 50ms.
	const timeout = time.Second
	rs, err := redisstore.New(client, redisstore.WithPrefix("promlimit-test:"), redisstore.WithTimeout(timeout))
	require.NoError(t, err)

	// Dial and load the script first, unhurried: a first decision's dial
	// and NOSCRIPT round trips are no part of the healthy phase.
	wctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	_, _, err = storecall.Take(rs, wctx, time.Time{}, core.Request{Key: "warm-up", Policy: core.Policy{Name: "warm-up", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}, Cost: 1})
	require.NoError(t, err)

	m, reg := newMetrics(t)
	// 1000 a second: the fallback never refuses, so that the health gauge
	// alone tells where the decisions come from.
	p := core.Policy{Name: "redis", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Second}
	l := newLimiter(t, rs, p, m, core.WithCircuitBreaker(2, 200*time.Millisecond),
		core.WithFallback(newMemStore(t)))
	c := newTally()
	key := "client-" + time.Now().Format(time.RFC3339Nano)

	for range 5 {
		d, err := c.allow(t, l, key)
		require.NoError(t, err)
		require.Equal(t, core.SourceStore, d.Source)
	}
	c.check(t, reg, "redis", "healthy")
	assert.Equal(t, "healthy", health(t, reg, "redis"))
	lat := series(t, reg, "ratelimit_store_duration_seconds")
	assert.Equal(t, 5.0, lat["limit=redis"], "every Redis decision timed")

	// Frozen: two timeouts open the breaker; then the fallback decides
	// without asking Redis, but for a probe now and then.
	srv.Freeze()
	frozen := true
	t.Cleanup(func() {
		if frozen {
			srv.Thaw()
		}
	})
	// The four decisions are made at one instant (AllowAt), on which the
	// breaker counts its probe interval: the two made once it opened come
	// within the interval, without a probe, however slow the machine.
	at := time.Now()
	for i := range 4 {
		d, err := c.allowAt(t, l, key, at)
		require.NoError(t, err, "frozen, call %d: a decision was made", i+1)
		require.Error(t, d.Err, "frozen, call %d", i+1)
		require.Equal(t, core.SourceFallback, d.Source)
	}
	// Two failures opened the breaker. A timeout may count as an error:
	// go-redis's read deadline, which is the Limiter's, can fire a moment
	// before the Limiter's own context sees it has expired.
	assert.Equal(t, 2.0, c.errors[outcome.StoreErrTimeout]+c.errors[outcome.StoreErrFailed], "failures before the breaker opened: %v", c.errors)
	assert.Positive(t, c.errors[outcome.StoreErrTimeout], "timeouts: %v", c.errors)
	c.check(t, reg, "redis", "frozen")
	assert.Equal(t, "failing", health(t, reg, "redis"))
	lat = series(t, reg, "ratelimit_store_duration_seconds")
	assert.GreaterOrEqual(t, lat["limit=redis|sum"], 2*timeout.Seconds(), "the timeouts' waits are in the histogram")

	srv.Thaw()
	frozen = false
	waitRedis(t, c, l, key)
	assert.Equal(t, "recovering", health(t, reg, "redis"), "the fallback still vouches for Redis")
	c.check(t, reg, "redis", "thawed")
	waitFor(t, func() bool { return l.Health() == core.Healthy }, "healthy after the window")
	assert.Equal(t, "healthy", health(t, reg, "redis"))

	// Killed: connections refused, an error of kind "error", until the
	// breaker opens.
	srv.Kill()
	at = time.Now() // one instant again: no probe among the four
	for i := range 4 {
		d, err := c.allowAt(t, l, key, at)
		require.NoError(t, err)
		require.Error(t, d.Err, "killed, call %d", i+1)
	}
	assert.Equal(t, 4.0, c.errors[outcome.StoreErrTimeout]+c.errors[outcome.StoreErrFailed], "failures before the breaker opened again: %v", c.errors)
	assert.Positive(t, c.errors[outcome.StoreErrFailed], "refused connections: %v", c.errors)
	c.check(t, reg, "redis", "killed")
	assert.Equal(t, "failing", health(t, reg, "redis"))

	srv.Restart()
	waitRedis(t, c, l, key)
	c.check(t, reg, "redis", "restarted")
	waitFor(t, func() bool { return l.Health() == core.Healthy }, "healthy after the restart")
	assert.Equal(t, "healthy", health(t, reg, "redis"))
	assert.Positive(t, c.outcomes["fallback_allowed"])
	assert.Positive(t, c.errors[outcome.StoreErrCircuitOpen])
}

// waitRedis decides until Redis decides again, at most testwait.D(15 s).
func waitRedis(t *testing.T, c *tally, l *core.Limiter, key string) {
	t.Helper()
	deadline := testwait.Deadline(15 * time.Second)
	for {
		d, err := c.allow(t, l, key)
		require.NoError(t, err)
		if d.Source == core.SourceStore {
			return
		}
		require.False(t, time.Now().After(deadline), "Redis does not decide again: %v", d.Err)
		time.Sleep(5 * time.Millisecond)
	}
}
