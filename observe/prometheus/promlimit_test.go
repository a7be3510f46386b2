package promlimit_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/observe/internal/latency"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
)

// TestDecisionsByOutcome sends known traffic through a memstore Limiter
// with a deny cache and finds each outcome counted exactly.
func TestDecisionsByOutcome(t *testing.T) {
	m, reg := newMetrics(t)
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}
	l := newLimiter(t, newMemStore(t), p, m, core.WithDenyCache(100))
	ctx := context.Background()

	for i := range 11 { // 10 admitted, then the store denies
		d, err := l.AllowN(ctx, "alice", 1, t0)
		require.NoError(t, err)
		require.Equal(t, i < 10, d.Allowed, "request %d", i+1)
	}
	d, err := l.AllowN(ctx, "alice", 1, t0) // remembered
	require.NoError(t, err)
	require.Equal(t, core.SourceDenyCache, d.Source)
	_, err = l.AllowN(ctx, "", 1, t0)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	_, err = l.AllowN(ctx, "bob", 0, t0)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.AllowN(cctx, "bob", 1, t0)
	require.ErrorIs(t, err, context.Canceled)

	assert.Equal(t, outcomes("allowed", 10, "denied", 1, "deny_cache", 1, "invalid", 2, "canceled", 1),
		decisions(t, reg, "api"))
	// Remaining 1 and 0 are under a fifth of 10.
	assert.Equal(t, map[string]float64{"limit=api": 2}, series(t, reg, "ratelimit_near_limit_total"))
	assert.Equal(t, map[string]float64{
		"kind=timeout,limit=api": 0, "kind=circuit_open,limit=api": 0, "kind=error,limit=api": 0,
	}, series(t, reg, "ratelimit_store_errors_total"))
	assert.Equal(t, "healthy", health(t, reg, "api"))
}

// TestExposition pins the names, types, help and labels of every series
// a freshly bound Limiter has, all at 0 (the dashboard and alert rules
// are written against them).
func TestExposition(t *testing.T) {
	m, reg := newMetrics(t, promlimit.WithBuckets(0.001, 0.1))
	s := newMemStore(t)
	newLimiter(t, s, core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute}, m)
	require.NoError(t, m.WatchStore("main", s))
	want := `
# HELP ratelimit_decisions_total Calls to a rate limiter, by limit and outcome: allowed or denied by the store; deny_cache, denied by the deny cache without asking the store; fallback_allowed or fallback_denied, decided by the fallback store while the store failed; failed_open or failed_closed, decided by the fail mode because the store failed; canceled, the caller gone before a decision; invalid, refused for bad input; shadow_denied, admitted in shadow mode though it would have been denied; locked_out, denied by a lockout after repeated denials; allow_listed or deny_listed, decided by an allow or deny list without asking the limiter.
# TYPE ratelimit_decisions_total counter
ratelimit_decisions_total{limit="login",outcome="allow_listed"} 0
ratelimit_decisions_total{limit="login",outcome="allowed"} 0
ratelimit_decisions_total{limit="login",outcome="canceled"} 0
ratelimit_decisions_total{limit="login",outcome="denied"} 0
ratelimit_decisions_total{limit="login",outcome="deny_cache"} 0
ratelimit_decisions_total{limit="login",outcome="deny_listed"} 0
ratelimit_decisions_total{limit="login",outcome="failed_closed"} 0
ratelimit_decisions_total{limit="login",outcome="failed_open"} 0
ratelimit_decisions_total{limit="login",outcome="fallback_allowed"} 0
ratelimit_decisions_total{limit="login",outcome="fallback_denied"} 0
ratelimit_decisions_total{limit="login",outcome="invalid"} 0
ratelimit_decisions_total{limit="login",outcome="locked_out"} 0
ratelimit_decisions_total{limit="login",outcome="shadow_denied"} 0
# HELP ratelimit_memstore_keys Keys a memory store holds, expired ones its janitor has not yet deleted included, by store.
# TYPE ratelimit_memstore_keys gauge
ratelimit_memstore_keys{store="main"} 0
# HELP ratelimit_near_limit_total Requests admitted that left their client less than a fifth of the limit's capacity, by limit.
# TYPE ratelimit_near_limit_total counter
ratelimit_near_limit_total{limit="login"} 0
# HELP ratelimit_store_duration_seconds Time the store took to decide a request, or was waited for until the limiter's timeout, by limit. Memory stores, which never wait, are not timed.
# TYPE ratelimit_store_duration_seconds histogram
ratelimit_store_duration_seconds_bucket{limit="login",le="0.001"} 0
ratelimit_store_duration_seconds_bucket{limit="login",le="0.1"} 0
ratelimit_store_duration_seconds_bucket{limit="login",le="+Inf"} 0
ratelimit_store_duration_seconds_sum{limit="login"} 0
ratelimit_store_duration_seconds_count{limit="login"} 0
# HELP ratelimit_store_errors_total Decisions the store failed, by limit and kind: timeout, no answer within the limiter's timeout; circuit_open, the store not asked because its circuit breaker is open; error, any other failure.
# TYPE ratelimit_store_errors_total counter
ratelimit_store_errors_total{kind="circuit_open",limit="login"} 0
ratelimit_store_errors_total{kind="error",limit="login"} 0
ratelimit_store_errors_total{kind="timeout",limit="login"} 0
# HELP ratelimit_store_health The limiter's view of its store, by limit: 1 for the current state (healthy; recovering, the fallback store still vouching for its admissions; failing, the circuit breaker open), 0 for the other two.
# TYPE ratelimit_store_health gauge
ratelimit_store_health{limit="login",state="failing"} 0
ratelimit_store_health{limit="login",state="healthy"} 1
ratelimit_store_health{limit="login",state="recovering"} 0
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}

// TestFailModesAndFallback: a store that is down, under FailOpen,
// FailClosed and a fallback store, each decision counted by outcome and
// each failure as an error.
func TestFailModesAndFallback(t *testing.T) {
	m, reg := newMetrics(t)
	down := &switchStore{store: newMemStore(t)}
	down.down.Store(true)
	noBreaker := core.WithCircuitBreaker(0, time.Second) // every decision asks the store
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour}
	ctx := context.Background()

	p.Name = "open"
	// Each failure is counted by kind: a generous timeout, so that none
	// is a timeout on a busy machine (the store, bounded, answers at once).
	open := newLimiter(t, down, p, m, noBreaker)
	p.Name = "closed"
	shut := p
	shut.FailClosed = time.Second
	closed := newLimiter(t, down, shut, m, noBreaker)
	p.Name = "fallback"
	fallback := newLimiter(t, down, p, m, noBreaker, core.WithFallback(newMemStore(t)))
	for _, c := range []struct {
		l     *core.Limiter
		calls int
	}{{open, 3}, {closed, 2}, {fallback, 3}} {
		for range c.calls {
			d, err := c.l.AllowN(ctx, "alice", 1, t0)
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, limits.ErrStore)
		}
	}

	assert.Equal(t, outcomes("failed_open", 3), decisions(t, reg, "open"))
	assert.Equal(t, outcomes("failed_closed", 2), decisions(t, reg, "closed"))
	assert.Equal(t, outcomes("fallback_allowed", 2, "fallback_denied", 1), decisions(t, reg, "fallback"))
	assert.Equal(t, map[string]float64{
		"kind=error,limit=open": 3, "kind=timeout,limit=open": 0, "kind=circuit_open,limit=open": 0,
		"kind=error,limit=closed": 2, "kind=timeout,limit=closed": 0, "kind=circuit_open,limit=closed": 0,
		"kind=error,limit=fallback": 3, "kind=timeout,limit=fallback": 0, "kind=circuit_open,limit=fallback": 0,
	}, series(t, reg, "ratelimit_store_errors_total"))
	// The fail mode's admissions say nothing of the quota: never near the
	// limit. The fallback's second admission leaves 0 of 2.
	assert.Equal(t, map[string]float64{"limit=open": 0, "limit=closed": 0, "limit=fallback": 1},
		series(t, reg, "ratelimit_near_limit_total"))
	// A store that may block is timed on every call.
	lat := series(t, reg, "ratelimit_store_duration_seconds")
	assert.Equal(t, []float64{3, 2, 3}, []float64{lat["limit=open"], lat["limit=closed"], lat["limit=fallback"]}, "histogram counts: %v", lat)
	assert.Equal(t, int64(8), down.calls.Load(), "store calls")
}

// TestTimeoutsAndCircuitOpen: a store that never answers times out twice,
// which opens the circuit breaker; the next decision is made without it.
func TestTimeoutsAndCircuitOpen(t *testing.T) {
	m, reg := newMetrics(t)
	const timeout = frozenTimeout
	l := newLimiter(t, frozenStore{}, core.Policy{Name: "frozen", Algorithm: core.TokenBucket, Limit: 100, Window: time.Second}, m,
		core.WithCircuitBreaker(2, time.Hour))
	ctx := context.Background()
	for i := range 3 {
		d, err := l.AllowN(ctx, "alice", 1, time.Time{})
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrStore, "call %d", i+1)
		require.True(t, d.Allowed, "call %d: fail open", i+1)
	}
	assert.Equal(t, outcomes("failed_open", 3), decisions(t, reg, "frozen"))
	assert.Equal(t, map[string]float64{
		"kind=timeout,limit=frozen": 2, "kind=circuit_open,limit=frozen": 1, "kind=error,limit=frozen": 0,
	}, series(t, reg, "ratelimit_store_errors_total"))
	lat := series(t, reg, "ratelimit_store_duration_seconds")
	assert.Equal(t, 2.0, lat["limit=frozen"], "only the calls that reached the store are timed")
	assert.GreaterOrEqual(t, lat["limit=frozen|sum"], 2*timeout.Seconds(), "each waited the timeout")
	assert.Equal(t, "failing", health(t, reg, "frozen"))
}

// TestHealthTransitions follows the health gauge of a store that goes down
// and comes back: healthy, failing, healthy without a fallback; healthy,
// failing, recovering, healthy with one.
func TestHealthTransitions(t *testing.T) {
	for _, withFallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", withFallback), func(t *testing.T) {
			m, reg := newMetrics(t)
			s := &switchStore{store: newMemStore(t)}
			opts := []core.Option{core.WithCircuitBreaker(2, time.Millisecond)}
			if withFallback {
				opts = append(opts, core.WithFallback(newMemStore(t)))
			}
			// The fallback vouches for the store for a window after the
			// failure: 1s.
			l := newLimiter(t, s, core.Policy{Name: "flaky", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Second}, m, opts...)
			ctx := context.Background()
			_, err := l.AllowN(ctx, "alice", 1, time.Time{})
			require.NoError(t, err)
			require.Equal(t, "healthy", health(t, reg, "flaky"))

			s.down.Store(true)
			for range 2 {
				d, err := l.AllowN(ctx, "alice", 1, time.Time{})
				require.NoError(t, err)
				require.ErrorIs(t, d.Err, limits.ErrStore)
			}
			require.Equal(t, "failing", health(t, reg, "flaky"))

			s.down.Store(false)
			waitFor(t, func() bool {
				d, err := l.AllowN(ctx, "alice", 1, time.Time{})
				return err == nil && d.Source == core.SourceStore
			}, "the store deciding again")
			if withFallback {
				assert.Equal(t, "recovering", health(t, reg, "flaky"))
				waitFor(t, func() bool { return l.Health() == core.Healthy }, "healthy again")
			}
			assert.Equal(t, "healthy", health(t, reg, "flaky"))
			errs := series(t, reg, "ratelimit_store_errors_total")
			assert.Equal(t, 2.0, errs["kind=error,limit=flaky"], "store errors: %v", errs)
		})
	}
}

// waitFor polls cond, at most testwait.D(10 s).
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := testwait.Deadline(10 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "waiting for %s", what)
		time.Sleep(2 * time.Millisecond)
	}
}

// TestMemStoreKeys: the gauge is the watched stores' Len at scrape time.
func TestMemStoreKeys(t *testing.T) {
	m, reg := newMetrics(t)
	s, other := newMemStore(t), newMemStore(t)
	require.NoError(t, m.WatchStore("main", s))
	require.NoError(t, m.WatchStore("other", other))
	p := core.Policy{Name: "a", Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute}
	a := newLimiter(t, s, p, m)
	p.Name = "b"
	b := newLimiter(t, s, p, m)
	ctx := context.Background()
	for i := range 5 {
		_, err := a.AllowN(ctx, fmt.Sprint("client-", i), 1, time.Time{})
		require.NoError(t, err)
	}
	for i := range 2 {
		_, err := b.AllowN(ctx, fmt.Sprint("client-", i), 1, time.Time{})
		require.NoError(t, err)
	}
	assert.Equal(t, map[string]float64{"store=main": 7, "store=other": 0}, series(t, reg, "ratelimit_memstore_keys"))

	for name, tc := range map[string]struct {
		name string
		s    interface{ Len() int }
		want string
	}{
		"nil store":     {"x", nil, "nil store"},
		"empty name":    {"", s, `store name "" is empty or not UTF-8`},
		"not UTF-8":     {"\xff", s, "is empty or not UTF-8"},
		"watched twice": {"main", other, `a store named "main" is watched already`},
	} {
		err := m.WatchStore(tc.name, tc.s)
		require.ErrorIs(t, err, core.ErrInvalidOption, name)
		assert.ErrorContains(t, err, tc.want, name)
	}
}

// TestStoreDuration: a store that may block is timed on every decision; a
// memory store, which never waits, is not.
func TestStoreDuration(t *testing.T) {
	m, reg := newMetrics(t)
	ctx := context.Background()
	p := core.Policy{Name: "bounded", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	bounded := newLimiter(t, &switchStore{store: newMemStore(t)}, p, m)
	for range 5 {
		_, err := bounded.AllowN(ctx, "alice", 1, time.Time{})
		require.NoError(t, err)
	}
	p.Name = "memory"
	memory := newLimiter(t, newMemStore(t), p, m)
	const n = 1000
	for range n {
		_, err := memory.AllowN(ctx, "alice", 1, time.Time{})
		require.NoError(t, err)
	}
	lat := series(t, reg, "ratelimit_store_duration_seconds")
	assert.Equal(t, 5.0, lat["limit=bounded"], "every bounded call timed")
	assert.Positive(t, lat["limit=bounded|sum"])
	assert.Zero(t, lat["limit=memory"], "memory decisions are not timed")
	assert.Equal(t, outcomes("allowed", n), decisions(t, reg, "memory"))

	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "ratelimit_store_duration_seconds" {
			var bounds []float64
			for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			assert.Equal(t, latency.Buckets(), bounds, "bucket bounds")
		}
	}
}

// TestDuplicateNames: two Limiters of one policy Name cannot share
// Metrics; their counts would merge.
func TestDuplicateNames(t *testing.T) {
	m, reg := newMetrics(t)
	s := newMemStore(t)
	p := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute}
	first := newLimiter(t, s, p, m)
	_, err := core.NewLimiter(s, []core.Policy{p}, core.WithObserver(m))
	require.ErrorIs(t, err, core.ErrInvalidOption)
	assert.ErrorContains(t, err, `a Limiter of policy "api" is bound already`)
	// Unnamed policies get their default name, which may collide too.
	unnamed := core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}
	newLimiter(t, s, unnamed, m)
	_, err = core.NewLimiter(s, []core.Policy{unnamed}, core.WithObserver(m))
	assert.ErrorContains(t, err, limits.DefaultName(unnamed.Algorithm, unnamed.Limit, unnamed.Window, unnamed.Burst))
	// The failed Bind changed nothing: the first one counts alone.
	_, err = first.AllowN(context.Background(), "alice", 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, outcomes("allowed", 1), decisions(t, reg, "api"))
	assert.Len(t, series(t, reg, "ratelimit_store_health"), 2*3, "three states per bound Limiter")
	// Other Metrics take the name.
	m2, _ := newMetrics(t)
	newLimiter(t, s, p, m2)
}

// TestOptions: a registry shared by several services prefixes and labels
// every series through client_golang's wrapping registerers; bad options
// are errors wrapping core.ErrInvalidOption.
func TestOptions(t *testing.T) {
	m, err := promlimit.New()
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"service": "checkout"}, prometheus.WrapRegistererWithPrefix("edge_", reg))
	require.NoError(t, wrapped.Register(m))
	newLimiter(t, newMemStore(t), core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute}, m)
	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		for _, s := range f.GetMetric() {
			assert.Contains(t, labelsOf(s), "service=checkout", f.GetName())
		}
	}
	assert.Equal(t, []string{
		"edge_ratelimit_decisions_total", "edge_ratelimit_near_limit_total", "edge_ratelimit_store_duration_seconds",
		"edge_ratelimit_store_errors_total", "edge_ratelimit_store_health",
	}, names)

	for _, tc := range []struct {
		opt  promlimit.Option
		want string
	}{
		{nil, "promlimit: option 0 is nil"},
		{promlimit.WithBuckets(), "promlimit.WithBuckets: no bucket"},
		{promlimit.WithBuckets(0, 1), "bound 0 is not positive and finite"},
		{promlimit.WithBuckets(-1), "bound -1 is not positive and finite"},
		{promlimit.WithBuckets(1, 2, 2), "bounds 2 and 2 are not increasing"},
		{promlimit.WithBuckets(0.5, math.Inf(1)), "bound +Inf is not positive and finite"},
	} {
		_, err := promlimit.New(tc.opt)
		require.ErrorIs(t, err, core.ErrInvalidOption, tc.want)
		assert.ErrorContains(t, err, tc.want)
	}

	// The options copy what they are given.
	bounds := []float64{0.001, 0.01}
	m, reg = newMetrics(t, promlimit.WithBuckets(bounds...))
	bounds[0] = 5
	newLimiter(t, newMemStore(t), core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute}, m)
	_, err = reg.Gather()
	assert.NoError(t, err)
}

// TestLint runs client_golang's promlint over every series, after traffic
// of every kind.
func TestLint(t *testing.T) {
	m, reg := newMetrics(t)
	s := newMemStore(t)
	require.NoError(t, m.WatchStore("main", s))
	l := newLimiter(t, s, core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}, m, core.WithDenyCache(10))
	for range 3 {
		_, _ = l.AllowN(context.Background(), "alice", 1, t0)
	}
	down := &switchStore{store: s}
	down.down.Store(true)
	f := newLimiter(t, down, core.Policy{Name: "down", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}, m)
	for range 4 {
		_, _ = f.AllowN(context.Background(), "alice", 1, t0)
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
	// The whole registry, as the examples serve it, with Go's collectors.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	_, err = reg.Gather()
	assert.NoError(t, err)
}

// TestConcurrent decides and scrapes at once, for the race detector, and
// finds every decision counted.
func TestConcurrent(t *testing.T) {
	m, reg := newMetrics(t)
	l := newLimiter(t, newMemStore(t), core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}, m)
	const workers, each = 4, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
				_, err := reg.Gather()
				assert.NoError(t, err)
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, err := l.AllowN(context.Background(), fmt.Sprintf("client-%d-%d", w, i%50), 1, time.Time{})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-scraped
	assert.Equal(t, outcomes("allowed", workers*each), decisions(t, reg, "api"))
}

// TestStripes: keys of many clients spread over every stripe of a
// counter, so that cores deciding for different clients rarely share
// one.
func TestStripes(t *testing.T) {
	for name, key := range map[string]func(i int) string{
		"IPv4":        func(i int) string { return fmt.Sprintf("ip:203.0.%d.%d", i/256, i%256) },
		"IPv4 /24":    func(i int) string { return fmt.Sprintf("ip:10.%d.%d.0/24", i/256, i%256) },
		"IPv6 prefix": func(i int) string { return fmt.Sprintf("ip:2001:db8:%x:%x00::/56", i/256, i%256) },
		"user":        func(i int) string { return fmt.Sprintf("user:%d", i) },
		"short":       func(i int) string { return fmt.Sprintf("%d", i) },
		"API key":     func(i int) string { return fmt.Sprintf("key:%016x", uint64(i)*0x9E3779B97F4A7C15) },
		"route and IP": func(i int) string {
			return fmt.Sprintf("route:GET /users/:id|ip:198.51.100.%d", i%256)
		},
	} {
		counts := make([]int, promlimit.Stripes)
		for i := range 1024 {
			s := promlimit.StripeOf(key(i))
			require.Less(t, s, uint32(promlimit.Stripes))
			counts[s]++
		}
		for s, n := range counts {
			assert.Greater(t, n, 1024/promlimit.Stripes/2, "%s: stripe %d has %d of 1024 keys: %v", name, s, n, counts)
		}
	}
	assert.Equal(t, uint32(0), promlimit.StripeOf(""))
}
