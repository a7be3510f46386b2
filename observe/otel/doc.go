// Package otellimit exports what each core.Limiter decides as OpenTelemetry
// metrics: the instruments of the Prometheus exporter (package promlimit),
// named so that OpenTelemetry's own Prometheus translation yields the very
// same series. A team that ships OTLP to Datadog, New Relic or CloudWatch
// and one that scrapes Prometheus see the same view, and one dashboard
// works on both.
//
// New creates the instruments on a meter named
// "github.com/apigate/ratelimit" of the MeterProvider given; the Metrics it
// returns is a core.Observer, given to each Limiter with core.WithObserver:
//
//	m, err := otellimit.New(provider)
//	...
//	defer m.Close()
//	l, err := core.NewLimiter(store, policy, core.WithObserver(m))
//
// A decision records its measurements without allocating. Client keys
// are never attributes: the number of series is bounded by the number of
// limits.
//
// # Instruments
//
// Names and units below are OpenTelemetry's; the Prometheus name is what
// the OpenTelemetry Prometheus exporter, the Collector and Prometheus's
// OTLP receiver make of them under the default translation (dots become
// underscores, a unit in braces is dropped, "s" appends _seconds, a
// monotonic counter appends _total). Attribute names are the Prometheus
// label names.
//
//	instrument                    kind       unit        attributes     Prometheus
//	ratelimit.decisions           counter    {decision}  limit outcome  ratelimit_decisions_total
//	ratelimit.near_limit          counter    {decision}  limit          ratelimit_near_limit_total
//	ratelimit.store.duration      histogram  s           limit          ratelimit_store_duration_seconds
//	ratelimit.store.errors        counter    {error}     limit kind     ratelimit_store_errors_total
//	ratelimit.store.health        gauge                  limit state    ratelimit_store_health
//	ratelimit.memstore.keys       gauge      {key}       store          ratelimit_memstore_keys
//
// The counters are Int64Counters, the histogram a Float64Histogram, the
// gauges Int64ObservableGauges. ratelimit.store.health has no unit: the
// unit "1" would add _ratio to its Prometheus name.
//
// limit is the policy's Name. ratelimit.decisions counts every call to a
// Limiter, outcome one of "allowed", "denied",
// "deny_cache", "fallback_allowed", "fallback_denied", "failed_open",
// "failed_closed", "canceled", "invalid", "shadow_denied", "locked_out",
// "allow_listed", "deny_listed" (see promlimit's
// ratelimit_decisions_total); ratelimit.near_limit the admissions that
// left less than a fifth of the capacity. ratelimit.store.duration records the store's
// latency when the Limiter measured it (every decision of a store that may
// block, such as Redis; a memory store is not timed), in promlimit's
// default buckets (an SDK View sets others). ratelimit.store.errors
// counts store failures by kind: "timeout",
// "circuit_open", "error".
//
// The gauges are observed when the reader collects, by one callback over
// the bound Limiters: ratelimit.store.health is 1 for the Limiter's
// current core.Health ("healthy", "recovering", "failing") and 0 for the
// other two; ratelimit.memstore.keys the Len of each memory store given
// to WatchStore.
//
// Every counter series of a bound limit (every outcome, every error kind)
// is created at Bind with a value of 0, so that the first denial is a rate
// and not the birth of a series. The Prometheus translation also adds the
// scope's otel_scope_name label (and target_info from the resource) unless
// the exporter is told otherwise.
package otellimit
