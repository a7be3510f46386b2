package demo

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/apigate/ratelimit/keyfuncs"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
	"github.com/apigate/ratelimit/reputation"
)

// MetricsPath is where every example serves its metrics, in the
// Prometheus text format, outside every limit: a scraper must never be
// rate limited (its 429s would be gaps in every graph), and its requests
// would count as traffic.
const MetricsPath = "/metrics"

// QuotaPath is where every example's Flow answers a client's quota in
// every layer, spending none (httplimit.WithQuota).
const QuotaPath = "/rate_limit"

// MemStoreName is the store label of the memory store's key gauge:
// ratelimit_memstore_keys{store="memory"}.
const MemStoreName = "memory"

// SkipMetrics reports whether r is GET MetricsPath, for
// httplimit.WithSkip on a limiter that covers every route. It compares the
// route, not the raw path: "/metrics/" or "/metrics/x" match no route, and
// stay limited like any 404. (Fiber's app.Use middleware sees the route
// "/" for every request: the Fiber example compares the path.)
func SkipMetrics(r keyfuncs.Request) bool {
	return r.Method() == http.MethodGet && r.Route() == MetricsPath
}

// newMetrics returns the Metrics every demo limiter reports to and the
// handler of MetricsPath: promlimit's series, the Go runtime's and the
// process's, on a registry of their own, and what rep scored. When store
// has a Len method (a memory store), its key count is reported too.
func newMetrics(store any, rep *reputation.Tracker) (*promlimit.Metrics, http.Handler, error) {
	m, err := promlimit.New()
	if err != nil {
		return nil, nil, err
	}
	if err := m.WatchReputation(rep); err != nil {
		return nil, nil, err
	}
	if s, ok := store.(interface{ Len() int }); ok {
		if err := m.WatchStore(MemStoreName, s); err != nil {
			return nil, nil, err
		}
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	return m, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), nil
}
