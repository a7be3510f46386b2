package otellimit_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	otellimit "github.com/apigate/ratelimit/observe/otel"
)

// The instruments' names, as the tests look them up.
const (
	decisions = "ratelimit.decisions"
	nearLimit = "ratelimit.near_limit"
	duration  = "ratelimit.store.duration"
	storeErrs = "ratelimit.store.errors"
	health    = "ratelimit.store.health"
	memKeys   = "ratelimit.memstore.keys"
)

// newMetrics returns Metrics over an SDK MeterProvider read by a
// ManualReader, both closed when t ends.
func newMetrics(t testing.TB) (*otellimit.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := otellimit.New(mp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m, r
}

// newMemStore returns a memstore closed when t ends.
func newMemStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newLimiter returns NewLimiter(s, p, opts...), failing t on an error.
func newLimiter(t testing.TB, s core.Store, p core.Policy, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(s, []core.Policy{p}, opts...)
	require.NoError(t, err)
	return l
}

// series names one series: the instrument's name, then its attributes
// sorted, as in `ratelimit.decisions{limit="a",outcome="allowed"}`.
func series(name string, kv ...string) string {
	if len(kv)%2 != 0 {
		panic("series: odd attributes")
	}
	var pairs []string
	for i := 0; i < len(kv); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

// seriesOf names the series of an instrument's data point.
func seriesOf(name string, attrs attribute.Set) string {
	var kv []string
	for _, a := range attrs.ToSlice() {
		kv = append(kv, string(a.Key), a.Value.Emit())
	}
	return series(name, kv...)
}

// snapshot is one collection, flattened: counters and gauges by series,
// and the histogram's sample count and bounds by series.
type snapshot struct {
	values  map[string]float64
	counts  map[string]uint64
	bounds  map[string][]float64
	buckets map[string][]uint64 // per bucket, not cumulative
	sums    map[string]float64
	monoton map[string]bool   // instrument name: a monotonic counter
	units   map[string]string // instrument name: its unit
	kinds   map[string]string // instrument name: "counter", "gauge", "histogram"
}

// collect reads r once.
func collect(t testing.TB, r *sdkmetric.ManualReader) snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	s := snapshot{
		values:  map[string]float64{},
		counts:  map[string]uint64{},
		bounds:  map[string][]float64{},
		buckets: map[string][]uint64{},
		sums:    map[string]float64{},
		monoton: map[string]bool{},
		units:   map[string]string{},
		kinds:   map[string]string{},
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otellimit.MeterName, sm.Scope.Name)
		for _, mt := range sm.Metrics {
			s.units[mt.Name] = mt.Unit
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality, mt.Name)
				s.monoton[mt.Name], s.kinds[mt.Name] = d.IsMonotonic, "counter"
				for _, p := range d.DataPoints {
					s.values[seriesOf(mt.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				s.kinds[mt.Name] = "gauge"
				for _, p := range d.DataPoints {
					s.values[seriesOf(mt.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				s.kinds[mt.Name] = "gauge"
				for _, p := range d.DataPoints {
					s.values[seriesOf(mt.Name, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				require.Equal(t, metricdata.CumulativeTemporality, d.Temporality, mt.Name)
				s.kinds[mt.Name] = "histogram"
				for _, p := range d.DataPoints {
					k := seriesOf(mt.Name, p.Attributes)
					s.counts[k], s.bounds[k], s.buckets[k], s.sums[k] = p.Count, p.Bounds, p.BucketCounts, p.Sum
				}
			default:
				t.Fatalf("instrument %s: unexpected data %T", mt.Name, mt.Data)
			}
		}
	}
	return s
}

// of returns the values of the series of one instrument.
func (s snapshot) of(name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range s.values {
		if strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

// nonZero returns the counter values of s that are not 0.
func (s snapshot) nonZero(names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, n := range names {
		for k, v := range s.of(n) {
			if v != 0 {
				out[k] = v
			}
		}
	}
	return out
}

// tally is an Observer that counts what an exporter should: the reference
// the instruments are compared with.
type tally struct {
	mu      sync.Mutex
	counts  map[string]float64 // decisions, near limit, store errors
	latency map[string]uint64  // events with a StoreLatency, by limit
}

func newTally() *tally {
	return &tally{counts: map[string]float64{}, latency: map[string]uint64{}}
}

// Observe counts e.
func (t *tally) Bind(*core.Limiter) (func(core.Event), error) { return t.Observe, nil }

func (t *tally) Observe(e core.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lim := e.Policy.Name
	t.counts[series(decisions, "limit", lim, "outcome", outcome.Of(&e.Decision).String())]++
	if outcome.NearLimit(&e.Decision) {
		t.counts[series(nearLimit, "limit", lim)]++
	}
	if k := outcome.StoreErrorKind(e.Err); k != "" {
		t.counts[series(storeErrs, "limit", lim, "kind", k)]++
	}
	if e.StoreLatency > 0 {
		t.latency[series(duration, "limit", lim)]++
	}
}

// snapshot returns copies of the counts.
func (t *tally) snapshot() (map[string]float64, map[string]uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := make(map[string]float64, len(t.counts))
	for k, v := range t.counts {
		c[k] = v
	}
	l := make(map[string]uint64, len(t.latency))
	for k, v := range t.latency {
		l[k] = v
	}
	return c, l
}

// requireMatches checks that the instruments in s count what t counted:
// every non-zero counter series, every histogram's sample count.
func requireMatches(tb testing.TB, t *tally, s snapshot) {
	tb.Helper()
	counts, latency := t.snapshot()
	require.Equal(tb, counts, s.nonZero(decisions, nearLimit, storeErrs))
	got := map[string]uint64{}
	for k, v := range s.counts {
		if v != 0 {
			got[k] = v
		}
	}
	require.Equal(tb, latency, got)
}

// errDown is the failure of a flakyStore that is down.
var errDown = errors.New("store down")

// flakyStore decides through a memstore, or fails with errDown while
// down, or waits for its context's deadline (the Limiter's timeout) while
// hung. It reports CallWithDeadline, so that every decision it makes is
// timed, and takes at least a microsecond to decide, so that the time is
// never 0.
type flakyStore struct {
	*memstore.Store
	down, hung atomic.Bool
}

func (s *flakyStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	start := time.Now()
	for time.Since(start) < time.Microsecond {
	}
	if s.hung.Load() {
		// It bounds itself, as a store that blocks must.
		t := time.NewTimer(hungTimeout)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
			return time.Time{}, fmt.Errorf("hung: %w", context.DeadlineExceeded)
		}
	}
	if s.down.Load() {
		return time.Time{}, errDown
	}
	_, err := s.Store.Take(ctx, now, reqs, out)
	return time.Time{}, err // decided as elsewhere: a store the Limiter times
}

// hungTimeout is how long a hung flakyStore takes to give up.
const hungTimeout = 20 * time.Millisecond
