package otellimit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
)

// promName is the Prometheus name of an OpenTelemetry instrument under
// the specification's default translation ("Prometheus and OpenMetrics
// Compatibility"), for the units otellimit uses: dots become underscores;
// a unit in braces is dropped, "s" appends _seconds, "1" appends _ratio
// to a gauge; a monotonic counter appends _total.
func promName(t testing.TB, name, unit, kind string) string {
	t.Helper()
	n := strings.ReplaceAll(name, ".", "_")
	switch {
	case unit == "" || strings.HasPrefix(unit, "{") && strings.HasSuffix(unit, "}"):
	case unit == "s":
		n += "_seconds"
	case unit == "1" && kind == "gauge":
		n += "_ratio"
	default:
		t.Fatalf("instrument %s: unit %q has no translation here", name, unit)
	}
	if kind == "counter" {
		n += "_total"
	}
	return n
}

// promHist is one Prometheus histogram series.
type promHist struct {
	count  uint64
	sum    float64
	bounds []float64
	cum    []uint64 // cumulative counts, by bound
}

// gatherProm reads reg: counters and gauges by series (named by the
// OpenTelemetry instrument whose Prometheus name is the family's, through
// names), histograms apart.
func gatherProm(t testing.TB, reg prometheus.Gatherer, names map[string]string) (map[string]float64, map[string]promHist) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	values, hists := map[string]float64{}, map[string]promHist{}
	for _, mf := range mfs {
		name, ok := names[mf.GetName()]
		require.True(t, ok, "promlimit family %s has no OpenTelemetry instrument", mf.GetName())
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, lp := range m.GetLabel() {
				kv = append(kv, lp.GetName(), lp.GetValue())
			}
			k := series(name, kv...)
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				values[k] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				values[k] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				ph := promHist{count: h.GetSampleCount(), sum: h.GetSampleSum()}
				for _, b := range h.GetBucket() {
					ph.bounds = append(ph.bounds, b.GetUpperBound())
					ph.cum = append(ph.cum, b.GetCumulativeCount())
				}
				hists[k] = ph
			default:
				t.Fatalf("family %s: unexpected type %v", mf.GetName(), mf.GetType())
			}
		}
	}
	return values, hists
}

// TestCrossCheck: the same traffic through Limiters observed by otellimit
// and promlimit at once, every kind of outcome included, gives the same
// value in every series: decisions per limit and outcome, near-limit,
// store errors by kind, histogram counts, buckets and sums, and the
// gauges; and OpenTelemetry's names translate to promlimit's.
func TestCrossCheck(t *testing.T) {
	om, r := newMetrics(t)
	pm, err := promlimit.New()
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(pm))

	ctx := context.Background()
	both := []core.Option{core.WithObserver(om), core.WithObserver(pm)}
	mk := func(s core.Store, p core.Policy, opts ...core.Option) *core.Limiter {
		return newLimiter(t, s, p, append(opts, both...)...)
	}
	main := newMemStore(t)
	require.NoError(t, om.WatchStore("main", main))
	require.NoError(t, pm.WatchStore("main", main))
	api := mk(main, core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}, core.WithDenyCache(100))
	bulk := mk(main, core.Policy{Name: "bulk", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second})
	flaky := map[string]*flakyStore{}
	newFlaky := func(name string, opts ...core.Option) *core.Limiter {
		fs := &flakyStore{Store: newMemStore(t)}
		flaky[name] = fs
		p := core.Policy{Name: name, Algorithm: core.SlidingWindowCounter, Limit: 10, Window: time.Hour}
		if name == "flaky-closed" {
			p.FailClosed = time.Second
		}
		opts = append(opts, core.WithCircuitBreaker(3, time.Hour))
		return mk(fs, p, opts...)
	}
	open := newFlaky("flaky-open")
	closed := newFlaky("flaky-closed")
	fb := newFlaky("flaky-fallback", core.WithFallback(newMemStore(t)))
	healed := newFlaky("flaky-healed", core.WithFallback(newMemStore(t)), core.WithCircuitBreaker(1, time.Millisecond))

	// Allowed, denied, the deny cache, near the limit, invalid, canceled.
	for c := range 4 {
		for range 8 {
			_, _ = api.AllowN(ctx, "client-"+string(rune('a'+c)), 1, time.Time{})
		}
	}
	_, _ = api.AllowN(ctx, "", 1, time.Time{})
	_, _ = api.AllowN(ctx, "client-a", 0, time.Time{})
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = api.AllowN(gone, "client-z", 1, time.Time{})
	// Many decisions at once, some near or over the limit.
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := range 3000 {
				_, _ = bulk.AllowN(ctx, "bulk-"+string(rune('a'+g+2*(i%3))), 1+int64(i%3), time.Time{})
			}
		})
	}
	wg.Wait()
	// Flaky stores: admissions, then failures (a timeout, errors), then
	// the open breaker; the fallback admits new clients and denies "k",
	// which it mirrored to the limit.
	for _, l := range []*core.Limiter{open, closed, fb} {
		for range 11 {
			_, _ = l.AllowN(ctx, "k", 1, time.Time{})
		}
	}
	for name, fs := range flaky {
		if name != "flaky-healed" {
			fs.hung.Store(true)
		}
	}
	for _, l := range []*core.Limiter{open, closed, fb} {
		d, err := l.AllowN(ctx, "new", 1, time.Time{})
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, context.DeadlineExceeded)
		flaky[l.Policies()[0].Name].hung.Store(false)
		flaky[l.Policies()[0].Name].down.Store(true)
		for range 4 {
			_, _ = l.AllowN(ctx, "new", 1, time.Time{})
		}
		for range 3 {
			_, _ = l.AllowN(ctx, "k", 1, time.Time{})
		}
	}
	// flaky-healed fails once, is probed back, and is recovering.
	_, _ = healed.AllowN(ctx, "k", 1, time.Time{})
	flaky["flaky-healed"].down.Store(true)
	_, _ = healed.AllowN(ctx, "k", 1, time.Time{})
	flaky["flaky-healed"].down.Store(false)
	require.Eventually(t, func() bool {
		d, err := healed.AllowN(ctx, "k", 1, time.Time{})
		return err == nil && d.Source == core.SourceStore
	}, testwait.D(5*time.Second), 2*time.Millisecond)

	// Both collected at the same moment, nothing in flight.
	s := collect(t, r)
	names := map[string]string{}
	for name, unit := range s.units {
		names[promName(t, name, unit, s.kinds[name])] = name
	}
	values, hists := gatherProm(t, reg, names)
	require.Len(t, names, 6, "every instrument, every family: %v", names)

	// Every counter and gauge series, zeros included, is the same.
	assert.Equal(t, values, s.values)
	// Every histogram series: the same samples, in the same buckets.
	for k, ph := range hists {
		assert.Equal(t, ph.count, s.counts[k], "%s: count", k)
		if ph.count == 0 {
			continue
		}
		assert.Equal(t, ph.bounds, s.bounds[k], "%s: bounds", k)
		var cum []uint64
		n := uint64(0)
		for _, c := range s.buckets[k][:len(s.bounds[k])] {
			n += c
			cum = append(cum, n)
		}
		assert.Equal(t, ph.cum, cum, "%s: buckets", k)
		assert.InEpsilon(t, ph.sum, s.sums[k], 1e-9, "%s: sum", k)
	}
	for k := range s.counts {
		assert.Contains(t, hists, k, "OpenTelemetry histogram series not in Prometheus")
	}

	// And the traffic did reach every path it was meant to.
	for _, c := range []struct{ limit, outcome string }{
		{"api", "allowed"}, {"api", "denied"}, {"api", "deny_cache"}, {"api", "invalid"}, {"api", "canceled"},
		{"bulk", "allowed"}, {"bulk", "denied"},
		{"flaky-open", "failed_open"}, {"flaky-closed", "failed_closed"},
		{"flaky-fallback", "fallback_allowed"}, {"flaky-fallback", "fallback_denied"},
		{"flaky-healed", "fallback_allowed"},
	} {
		assert.Positive(t, s.values[series(decisions, "limit", c.limit, "outcome", c.outcome)], "%s %s", c.limit, c.outcome)
	}
	for _, l := range []string{"flaky-open", "flaky-closed", "flaky-fallback"} {
		assert.Equal(t, 1.0, s.values[series(storeErrs, "limit", l, "kind", "timeout")], l)
		assert.Equal(t, 2.0, s.values[series(storeErrs, "limit", l, "kind", "error")], l)
		assert.Equal(t, 5.0, s.values[series(storeErrs, "limit", l, "kind", "circuit_open")], l)
		assert.Equal(t, 1.0, s.values[series(health, "limit", l, "state", "failing")], l)
	}
	assert.Equal(t, 1.0, s.values[series(health, "limit", "flaky-healed", "state", "recovering")])
	assert.Equal(t, 1.0, s.values[series(health, "limit", "api", "state", "healthy")])
	assert.Positive(t, s.values[series(nearLimit, "limit", "api")])
	assert.Positive(t, s.values[series(nearLimit, "limit", "bulk")])
	assert.Positive(t, s.values[series(memKeys, "store", "main")])
	assert.Zero(t, s.counts[series(duration, "limit", "bulk")], "a memory store is not timed")
	assert.Positive(t, s.counts[series(duration, "limit", "flaky-fallback")])
}
