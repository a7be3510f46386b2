package otellimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/observe/internal/latency"
)

// meterName is the name of the meter New creates its instruments on (the
// instrumentation scope, otel_scope_name in Prometheus).
const meterName = "github.com/apigate/ratelimit"

// Attribute keys, the Prometheus label names.
const (
	attrLimit   = "limit"
	attrOutcome = "outcome"
	attrKind    = "kind"
	attrState   = "state"
	attrStore   = "store"
)

// errClosed is returned by Bind and WatchStore after Close.
var errClosed = errors.New("otellimit: metrics closed")

// storeErrorKinds are the kinds of ratelimit.store.errors, in the order
// of bound.errors.
var storeErrorKinds = [...]string{outcome.StoreErrTimeout, outcome.StoreErrCircuitOpen, outcome.StoreErrFailed}

// healthStates are the core.Health values, in order.
var healthStates = [...]core.Health{core.Healthy, core.Recovering, core.Failing}

// Metrics records the events of the Limiters bound to it (core.WithObserver) as
// OpenTelemetry measurements, and observes their gauges when the reader
// collects. It is safe for concurrent use. Close unregisters its callback.
type Metrics struct {
	decisions metric.Int64Counter
	nearLimit metric.Int64Counter
	duration  metric.Float64Histogram
	errors    metric.Int64Counter
	health    metric.Int64ObservableGauge
	memKeys   metric.Int64ObservableGauge

	reg    metric.Registration
	closed atomic.Bool

	mu     sync.RWMutex
	limits map[string]*bound // by limit name
	order  []*bound          // in the order bound, for the callback
	stores []watchedStore
}

// watchedStore is a memory store given to WatchStore.
type watchedStore struct {
	name string
	s    interface{ Len() int }
	attr metric.ObserveOption
}

var _ core.Observer = (*Metrics)(nil)

// New creates the instruments on mp's meter named
// "github.com/apigate/ratelimit" (the instrumentation scope,
// otel_scope_name in Prometheus) and registers the callback that observes
// the gauges. The store latency histogram's buckets are promlimit's
// (dense between 100µs and 10ms, where Redis answers); an SDK View on
// "ratelimit.store.duration" sets others. It fails with an error wrapping
// core.ErrInvalidOption when mp is nil, and with the meter's error when an
// instrument cannot be created.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, fmt.Errorf("%w: otellimit: nil MeterProvider", core.ErrInvalidOption)
	}
	meter := mp.Meter(meterName)
	m := &Metrics{limits: make(map[string]*bound)}
	var err error
	mk := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	mk(func() (e error) {
		m.decisions, e = meter.Int64Counter("ratelimit.decisions", metric.WithUnit("{decision}"),
			metric.WithDescription("Calls to a rate limiter, by limit and outcome."))
		return e
	})
	mk(func() (e error) {
		m.nearLimit, e = meter.Int64Counter("ratelimit.near_limit", metric.WithUnit("{decision}"),
			metric.WithDescription("Admissions that left less than a fifth of the limit's capacity."))
		return e
	})
	mk(func() (e error) {
		m.duration, e = meter.Float64Histogram("ratelimit.store.duration", metric.WithUnit("s"),
			metric.WithDescription("Time the store took to decide, or was waited for until the limiter's timeout (memory stores, which never wait, are not timed)."),
			metric.WithExplicitBucketBoundaries(latency.Buckets()...))
		return e
	})
	mk(func() (e error) {
		m.errors, e = meter.Int64Counter("ratelimit.store.errors", metric.WithUnit("{error}"),
			metric.WithDescription("Store failures, by kind: timeout, circuit_open, error."))
		return e
	})
	mk(func() (e error) {
		m.health, e = meter.Int64ObservableGauge("ratelimit.store.health",
			metric.WithDescription("1 for the store's current state (healthy, recovering, failing), 0 for the others."))
		return e
	})
	mk(func() (e error) {
		m.memKeys, e = meter.Int64ObservableGauge("ratelimit.memstore.keys", metric.WithUnit("{key}"),
			metric.WithDescription("Keys a memory store holds."))
		return e
	})
	mk(func() (e error) {
		m.reg, e = meter.RegisterCallback(m.observeGauges, m.health, m.memKeys)
		return e
	})
	if err != nil {
		return nil, fmt.Errorf("otellimit: %w", err)
	}
	return m, nil
}

// Close unregisters the callback that observes the gauges; from then on
// the bound Limiters' events are no longer recorded, and Bind and
// WatchStore fail with an error. It is idempotent.
func (m *Metrics) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	return m.reg.Unregister()
}

// Bind makes ready the series of l's limits (its policies' Names),
// creating every counter series at 0, and returns the function that
// records l's events; NewLimiter calls it when given m by
// core.WithObserver. A Limiter of several policies (layers) has series
// for each: a request is recorded under every layer that applied to it,
// each with that layer's own decision, and the Limiter's health and
// gauges under every layer. Bind fails when a Limiter of the same limit
// name is already bound, since their series would be one, and after
// Close.
func (m *Metrics) Bind(l *core.Limiter) (func(core.Event), error) {
	if l == nil {
		return nil, errors.New("otellimit: nil Limiter")
	}
	var names []string
	for _, p := range l.Policies() {
		names = append(names, p.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return nil, errClosed
	}
	for _, name := range names {
		if _, dup := m.limits[name]; dup {
			return nil, fmt.Errorf("otellimit: limit %q is already bound: limit names must be unique", name)
		}
	}
	byName := make(map[string]*bound, len(names))
	for _, name := range names {
		b := m.newBound(name, l)
		b.zero()
		m.limits[name] = b
		m.order = append(m.order, b)
		byName[name] = b
	}
	if len(names) == 1 {
		return byName[names[0]].observe, nil
	}
	return func(e core.Event) {
		if b := byName[e.Policy.Name]; b != nil {
			b.observe(e)
		}
	}, nil
}

// WatchStore makes each collection report what store s tells of itself,
// under the attribute store=name: its key count, s.Len(), as the gauge
// ratelimit.memstore.keys (a *memstore.Store has Len). It fails with an
// error wrapping core.ErrInvalidOption when s is nil, or name is empty,
// not UTF-8 or watched already, and with an error after Close.
func (m *Metrics) WatchStore(name string, s interface{ Len() int }) error {
	if name == "" || !utf8.ValidString(name) {
		return fmt.Errorf("%w: otellimit: WatchStore: store name %q is empty or not UTF-8", core.ErrInvalidOption, name)
	}
	if s == nil {
		return fmt.Errorf("%w: otellimit: WatchStore: nil store", core.ErrInvalidOption)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return errClosed
	}
	for _, w := range m.stores {
		if w.name == name {
			return fmt.Errorf("%w: otellimit: WatchStore: store %q is already watched", core.ErrInvalidOption, name)
		}
	}
	m.stores = append(m.stores, watchedStore{
		name: name,
		s:    s,
		attr: metric.WithAttributeSet(attribute.NewSet(attribute.String(attrStore, name))),
	})
	return nil
}

// observeGauges is the callback that observes the gauges of every bound
// Limiter and watched store.
func (m *Metrics) observeGauges(_ context.Context, o metric.Observer) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, b := range m.order {
		h := b.l.Health()
		for i, s := range healthStates {
			v := int64(0)
			if s == h {
				v = 1
			}
			o.ObserveInt64(m.health, v, b.health[i])
		}
	}
	for _, w := range m.stores {
		o.ObserveInt64(m.memKeys, int64(w.s.Len()), w.attr)
	}
	return nil
}
