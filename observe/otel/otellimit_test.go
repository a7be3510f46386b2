package otellimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	otellimit "github.com/apigate/ratelimit/observe/otel"
)

// TestOutcomesOverMemstore: a memory-store Limiter with a deny cache,
// driven through every outcome it can reach without a failing store,
// counts exactly those, and every other series of the limit exists at 0.
func TestOutcomesOverMemstore(t *testing.T) {
	m, r := newMetrics(t)
	ref := newTally()
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}
	l := newLimiter(t, newMemStore(t), p, core.WithDenyCache(10), core.WithObserver(m), core.WithObserver(ref))
	ctx := context.Background()
	for i := range 8 {
		d, _ := l.AllowN(ctx, "client-a", 1, time.Time{})
		require.Equal(t, i < 5, d.Allowed, "request %d", i)
	}
	_, err := l.AllowN(ctx, "", 1, time.Time{})
	require.ErrorIs(t, err, core.ErrInvalidOption)
	_, err = l.AllowN(ctx, "client-b", 6, time.Time{})
	require.ErrorIs(t, err, core.ErrInvalidOption)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.AllowN(gone, "client-b", 1, time.Time{})
	require.ErrorIs(t, err, context.Canceled)

	s := collect(t, r)
	want := map[string]float64{
		series(decisions, "limit", "api", "outcome", "allowed"):    5,
		series(decisions, "limit", "api", "outcome", "denied"):     1,
		series(decisions, "limit", "api", "outcome", "deny_cache"): 2,
		series(decisions, "limit", "api", "outcome", "invalid"):    2,
		series(decisions, "limit", "api", "outcome", "canceled"):   1,
		// Remaining 0 of 5 after the fifth admission: under a fifth.
		series(nearLimit, "limit", "api"): 1,
	}
	assert.Equal(t, want, s.nonZero(decisions, nearLimit, storeErrs))
	requireMatches(t, ref, s)

	// Every outcome and error kind has its series from Bind on.
	for _, o := range outcome.All() {
		assert.Contains(t, s.values, series(decisions, "limit", "api", "outcome", o.String()))
	}
	for _, k := range []string{outcome.StoreErrTimeout, outcome.StoreErrCircuitOpen, outcome.StoreErrFailed} {
		assert.Equal(t, 0.0, s.values[series(storeErrs, "limit", "api", "kind", k)], k)
	}
	assert.Len(t, s.of(decisions), len(outcome.All()))
	assert.True(t, s.monoton[decisions] && s.monoton[nearLimit] && s.monoton[storeErrs])

	// Gauges, at collection.
	assert.Equal(t, map[string]float64{
		series(health, "limit", "api", "state", "healthy"):    1,
		series(health, "limit", "api", "state", "recovering"): 0,
		series(health, "limit", "api", "state", "failing"):    0,
	}, s.of(health))
}

// TestMemstoreNotTimed: a memory store's decisions, which never wait, are
// not timed, and the histogram stays empty.
func TestMemstoreNotTimed(t *testing.T) {
	m, r := newMetrics(t)
	ref := newTally()
	p := core.Policy{Name: "memory", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	l := newLimiter(t, newMemStore(t), p, core.WithObserver(m), core.WithObserver(ref))
	const n = 1000
	for range n {
		_, err := l.AllowN(context.Background(), "k", 1, time.Time{})
		require.NoError(t, err)
	}
	s := collect(t, r)
	requireMatches(t, ref, s)
	got := s.counts[series(duration, "limit", "memory")]
	assert.Zero(t, got, "a memory store is not timed")
	assert.Equal(t, 1.0, s.values[series(decisions, "limit", "memory", "outcome", "allowed")]/n)
}

// TestStoreFailures: a store that fails yields failed_open or
// failed_closed, errors of kind error then circuit_open, a latency for
// every decision that asked the store, and the health gauge follows the
// breaker: failing, then healthy (no fallback) or recovering (fallback)
// once a probe succeeds.
func TestStoreFailures(t *testing.T) {
	m, r := newMetrics(t)
	ref := newTally()
	ctx := context.Background()
	const probe = 250 * time.Millisecond
	// Every decision is made at a time the test gives (AllowAt), which the
	// breaker counts its probe interval on: the decisions made while it is
	// open are all made without the store, and the probe comes when the
	// test says, however slow the machine.
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	mk := func(name string, opts ...core.Option) (*core.Limiter, *flakyStore) {
		fs := &flakyStore{Store: newMemStore(t)}
		p := core.Policy{Name: name, Algorithm: core.FixedWindow, Limit: 100, Window: time.Hour}
		if name == "closed" {
			p.FailClosed = time.Second
		}
		opts = append(opts, core.WithCircuitBreaker(2, probe), core.WithObserver(m), core.WithObserver(ref))
		return newLimiter(t, fs, p, opts...), fs
	}
	open, openStore := mk("open")
	closed, closedStore := mk("closed")
	fb, fbStore := mk("fallback", core.WithFallback(newMemStore(t)))
	lims := []*core.Limiter{open, closed, fb}
	stores := []*flakyStore{openStore, closedStore, fbStore}

	for _, l := range lims {
		_, err := l.AllowN(ctx, "k", 1, at)
		require.NoError(t, err)
	}
	for _, s := range stores {
		s.down.Store(true)
	}
	// Two failures open the breaker; three more are decided without the
	// store, within the probe interval.
	for range 5 {
		for _, l := range lims {
			d, err := l.AllowN(ctx, "k", 1, at)
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, limits.ErrStore)
		}
	}
	s := collect(t, r)
	requireMatches(t, ref, s)
	for _, c := range []struct{ limit, outcome string }{
		{"open", "failed_open"}, {"closed", "failed_closed"}, {"fallback", "fallback_allowed"},
	} {
		assert.Equal(t, 1.0, s.values[series(decisions, "limit", c.limit, "outcome", "allowed")], c.limit)
		assert.Equal(t, 5.0, s.values[series(decisions, "limit", c.limit, "outcome", c.outcome)], c.limit)
		assert.Equal(t, 2.0, s.values[series(storeErrs, "limit", c.limit, "kind", "error")], c.limit)
		assert.Equal(t, 3.0, s.values[series(storeErrs, "limit", c.limit, "kind", "circuit_open")], c.limit)
		assert.Equal(t, 0.0, s.values[series(storeErrs, "limit", c.limit, "kind", "timeout")], c.limit)
		// The first success and the two failures asked the store.
		assert.Equal(t, uint64(3), s.counts[series(duration, "limit", c.limit)], c.limit)
		assert.Equal(t, 1.0, s.values[series(health, "limit", c.limit, "state", "failing")], c.limit)
		assert.Equal(t, 0.0, s.values[series(health, "limit", c.limit, "state", "healthy")], c.limit)
	}
	// A fail-open admission is not near the limit, whatever it leaves.
	assert.Equal(t, 0.0, s.values[series(nearLimit, "limit", "open")])

	for _, st := range stores {
		st.down.Store(false)
	}
	// A probe interval later, the first decision probes the store, which
	// answers: the breaker closes.
	for _, l := range lims {
		d, err := l.AllowN(ctx, "k", 1, at.Add(probe))
		require.NoError(t, err, l.Policies()[0].Name)
		require.Equal(t, core.SourceStore, d.Source, l.Policies()[0].Name)
	}
	s = collect(t, r)
	requireMatches(t, ref, s)
	for limit, state := range map[string]string{"open": "healthy", "closed": "healthy", "fallback": "recovering"} {
		for _, h := range []string{"healthy", "recovering", "failing"} {
			want := 0.0
			if h == state {
				want = 1
			}
			assert.Equal(t, want, s.values[series(health, "limit", limit, "state", h)], "%s %s", limit, h)
		}
	}
}

// TestMemStoreKeys: WatchStore's gauge reports the store's Len at
// collection, by store name.
func TestMemStoreKeys(t *testing.T) {
	m, r := newMetrics(t)
	a, b := newMemStore(t), newMemStore(t)
	require.NoError(t, m.WatchStore("a", a))
	require.NoError(t, m.WatchStore("b", b))
	p := core.Policy{Name: "keys", Algorithm: core.SlidingWindowCounter, Limit: 10, Window: time.Minute}
	l := newLimiter(t, a, p, core.WithObserver(m))
	for _, k := range []string{"x", "y", "z"} {
		_, err := l.AllowN(context.Background(), k, 1, time.Time{})
		require.NoError(t, err)
	}
	assert.Equal(t, map[string]float64{
		series(memKeys, "store", "a"): 3,
		series(memKeys, "store", "b"): 0,
	}, collect(t, r).of(memKeys))

	require.ErrorIs(t, m.WatchStore("a", b), core.ErrInvalidOption, "a name watched twice")
	require.ErrorIs(t, m.WatchStore("", b), core.ErrInvalidOption)
	require.ErrorIs(t, m.WatchStore("\xff", b), core.ErrInvalidOption)
	require.ErrorIs(t, m.WatchStore("c", nil), core.ErrInvalidOption)
}

// TestBindErrors: a limit name bound twice fails the second NewLimiter;
// after Close, so does any; Close stops the recording and the gauges.
func TestBindErrors(t *testing.T) {
	m, r := newMetrics(t)
	st := newMemStore(t)
	p := core.Policy{Name: "dup", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute}
	l := newLimiter(t, st, p, core.WithObserver(m))
	_, err := core.NewLimiter(st, []core.Policy{p}, core.WithObserver(m))
	require.ErrorIs(t, err, core.ErrInvalidOption)
	require.ErrorContains(t, err, `"dup"`)
	_, err = m.Bind(nil)
	require.Error(t, err)

	_, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "Close is idempotent")
	_, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	s := collect(t, r)
	assert.Equal(t, 1.0, s.values[series(decisions, "limit", "dup", "outcome", "allowed")], "not counted after Close")
	assert.Empty(t, s.of(health), "no gauges after Close")

	p.Name = "late"
	_, err = core.NewLimiter(st, []core.Policy{p}, core.WithObserver(m))
	require.ErrorIs(t, err, otellimit.ErrClosed)
	require.ErrorIs(t, m.WatchStore("late", st), otellimit.ErrClosed)
}

// TestBuckets: the histogram has promlimit's buckets, and an SDK View
// sets others, as for any instrument.
func TestBuckets(t *testing.T) {
	_, err := otellimit.New(nil)
	require.ErrorIs(t, err, core.ErrInvalidOption)

	bounds := []float64{0.001, 0.01, 0.1}
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Name: duration},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: bounds}})))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := otellimit.New(mp)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	fs := &flakyStore{Store: newMemStore(t)}
	p := core.Policy{Name: "b", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute}
	l := newLimiter(t, fs, p, core.WithObserver(m))
	_, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	s := collect(t, r)
	assert.Equal(t, bounds, s.bounds[series(duration, "limit", "b")])
	assert.Equal(t, uint64(1), s.counts[series(duration, "limit", "b")])
	assert.Greater(t, s.sums[series(duration, "limit", "b")], 0.0)

	// A noop provider works, and records nothing anywhere.
	nm, err := otellimit.New(noop.NewMeterProvider())
	require.NoError(t, err)
	p.Name = "noop"
	l = newLimiter(t, fs, p, core.WithObserver(nm))
	_, err = l.AllowN(context.Background(), "k", 1, time.Time{})
	require.NoError(t, err)
	require.NoError(t, nm.Close())
}

// refusingProvider's meter refuses to register callbacks.
type refusingProvider struct{ noop.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

type refusingMeter struct{ noop.Meter }

var errRegister = errors.New("register refused")

func (refusingMeter) RegisterCallback(metric.Callback, ...metric.Observable) (metric.Registration, error) {
	return nil, errRegister
}

// TestMeterError: New returns the meter's error.
func TestMeterError(t *testing.T) {
	_, err := otellimit.New(refusingProvider{})
	require.ErrorIs(t, err, errRegister)
}

// TestConcurrent: decisions, Binds and collections at once (for the race detector), and no decision lost.
func TestConcurrent(t *testing.T) {
	m, r := newMetrics(t)
	st := newMemStore(t)
	p := core.Policy{Name: "shared", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Second}
	l := newLimiter(t, st, p, core.WithObserver(m))
	const workers, each = 2, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				_, _ = l.AllowN(context.Background(), "k", 1, time.Time{})
			}
		})
		wg.Go(func() {
			q := p
			for i := range 20 {
				q.Name = fmt.Sprintf("late-%d-%d", w, i)
				newLimiter(t, st, q, core.WithObserver(m))
				collect(t, r)
			}
		})
	}
	wg.Wait()
	s := collect(t, r)
	assert.Equal(t, float64(workers*each), s.values[series(decisions, "limit", "shared", "outcome", "allowed")])
	assert.Len(t, s.of(health), 3*(1+workers*20))
}
