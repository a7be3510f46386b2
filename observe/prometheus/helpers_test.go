package promlimit_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"fmt"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
)

// t0 is the time the tests decide at, when they pass one.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// newMemStore returns a memstore with the default options, closed when t
// ends.
func newMemStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newMetrics returns Metrics built with opts, registered on a pedantic
// registry of their own (which checks that what Collect sends matches
// what Describe announced).
func newMetrics(t testing.TB, opts ...promlimit.Option) (*promlimit.Metrics, *prometheus.Registry) {
	t.Helper()
	m, err := promlimit.New(opts...)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	return m, reg
}

// newLimiter returns a Limiter of p over s observed by m.
func newLimiter(t testing.TB, s core.Store, p core.Policy, m *promlimit.Metrics, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(s, []core.Policy{p}, append([]core.Option{core.WithObserver(m)}, opts...)...)
	require.NoError(t, err)
	return l
}

// series gathers reg and returns the value of every series of the family
// name, keyed by its labels ("limit=api,outcome=allowed"), constant
// labels included. A histogram's series are its count, under its labels,
// and its sum, under its labels followed by "|sum".
func series(t testing.TB, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := labelsOf(m)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.GetHistogram().GetSampleCount())
				out[key+"|sum"] = m.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("%s: unexpected type %s", name, f.GetType())
			}
		}
	}
	return out
}

func labelsOf(m *dto.Metric) string {
	var kv []string
	for _, l := range m.GetLabel() {
		kv = append(kv, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// decisions returns the ratelimit_decisions_total series of limit, by
// outcome, every outcome included.
func decisions(t testing.TB, reg prometheus.Gatherer, limit string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	prefix := "limit=" + limit + ",outcome="
	for k, v := range series(t, reg, "ratelimit_decisions_total") {
		if o, ok := strings.CutPrefix(k, prefix); ok {
			out[o] = v
		}
	}
	return out
}

// outcomes returns counts for every outcome: 0 but for those given, as
// name, count pairs.
func outcomes(counts ...any) map[string]float64 {
	out := map[string]float64{}
	for _, o := range outcome.All() {
		out[o.String()] = 0
	}
	for i := 0; i < len(counts); i += 2 {
		name := counts[i].(string)
		if _, ok := out[name]; !ok {
			panic("no outcome " + name)
		}
		out[name] = float64(counts[i+1].(int))
	}
	return out
}

// health returns the state whose ratelimit_store_health series of limit
// is 1, checking that exactly one is and the others are 0.
func health(t testing.TB, reg prometheus.Gatherer, limit string) string {
	t.Helper()
	var on []string
	n := 0
	for k, v := range series(t, reg, "ratelimit_store_health") {
		state, ok := strings.CutPrefix(k, "limit="+limit+",state=")
		if !ok {
			continue
		}
		n++
		switch v {
		case 1:
			on = append(on, state)
		case 0:
		default:
			t.Fatalf("store_health{limit=%q,state=%q} = %v", limit, state, v)
		}
	}
	require.Equal(t, 3, n, "store_health series of %q", limit)
	require.Len(t, on, 1, "store_health states of %q at 1", limit)
	return on[0]
}

// errDown is what a failed Redis answers.
var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// switchStore is a real memstore behind a switch that makes it fail, as
// a Redis that goes down and comes back. It returns no decision time, so
// the Limiter times every call, as a Redis store's.
type switchStore struct {
	quietless
	store core.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (s *switchStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if len(reqs) != 1 {
		return time.Time{}, errors.New("fake store: no layers")
	}
	s.calls.Add(1)
	if s.down.Load() {
		return time.Time{}, errDown
	}
	_, err := s.store.Take(ctx, now, reqs, out)
	return time.Time{}, err // like a Redis store: no decision time, timed
}

func (s *switchStore) Reset(ctx context.Context, key string, p core.Policy) error {
	if s.down.Load() {
		return errDown
	}
	return s.store.Reset(ctx, key, p)
}

// frozenStore never answers: it waits for its context's deadline, as a
// Redis stopped mid-command behind a client that honours deadlines.
type frozenStore struct{ quietless }

// frozenTimeout is how long a frozenStore waits before it gives up: it
// bounds itself, as a store that blocks must.
const frozenTimeout = 20 * time.Millisecond

func (frozenStore) Take(ctx context.Context, now time.Time, _ []core.Request, _ []core.Decision) (time.Time, error) {
	return time.Time{}, frozenStore{}.wait(ctx)
}

func (frozenStore) Reset(ctx context.Context, _ string, _ core.Policy) error {
	return frozenStore{}.wait(ctx)
}

// Timeout is frozenTimeout, the budget the exporters report.
func (frozenStore) Timeout() time.Duration { return frozenTimeout }

func (frozenStore) wait(ctx context.Context) error {
	t := time.NewTimer(frozenTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("frozen: %w", context.DeadlineExceeded)
	}
}

// quietless gives a fake store the Peek and Refund that no test asks of
// it.
type quietless struct{}

var errQuiet = errors.New("fake store: no peeks, no refunds")

func (quietless) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errQuiet
}
func (quietless) Refund(context.Context, time.Time, []core.Request) error { return errQuiet }
