// Package promlimit exports what each core.Limiter decides as Prometheus
// metrics. Build one Metrics, register it, and give it to every Limiter:
//
//	m, err := promlimit.New()
//	reg.MustRegister(m)
//	l, err := core.NewLimiter(store, policy, core.WithObserver(m))
//	err = m.WatchStore("main", memStore) // the memory store's key count
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The series (to prefix or label them in a shared registry, register the
// Metrics through prometheus.WrapRegistererWithPrefix or WrapRegistererWith):
//
//	ratelimit_decisions_total{limit,outcome}       counter, every call
//	ratelimit_near_limit_total{limit}              counter, admitted with under 20% left
//	ratelimit_store_duration_seconds{limit}        histogram of the store's latency
//	ratelimit_store_errors_total{limit,kind}       counter: timeout, circuit_open, error
//	ratelimit_store_health{limit,state}            gauge: 1 for the current state
//	ratelimit_memstore_keys{store}                 gauge (WatchStore)
//
// limit is the policy's Name. outcome is one of allowed, denied,
// deny_cache, fallback_allowed, fallback_denied, failed_open,
// failed_closed, canceled, invalid, shadow_denied, locked_out,
// allow_listed and deny_listed (see the metric's help); kind one of
// timeout, circuit_open and error. Client keys are never labels: there are as many
// series as limits, whatever the traffic. Each Limiter's series exist,
// at 0, from the moment it is built, so that rate() sees its first denial.
//
// A Limiter bound to Metrics (core.WithObserver) pays a few atomic
// additions per decision: no lookup, no allocation.
package promlimit

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/observe/internal/latency"
	"github.com/apigate/ratelimit/reputation"
)

// Metrics counts the decisions of the Limiters it observes and reports
// their store's health, as a prometheus.Collector. Give it to Limiters
// with core.WithObserver: it is a core.Observer, and NewLimiter binds it to
// the Limiter (see Bind). Register it once on a prometheus.Registerer. It
// keeps every Limiter bound to it for as long as it lives, to read their
// health at each scrape; two Limiters bound to one Metrics must have
// policies of different Names. It is safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.Desc
	nearLimit   *prometheus.Desc
	storeErrors *prometheus.Desc
	latency     *prometheus.HistogramVec

	health  *prometheus.Desc
	memKeys *prometheus.Desc

	repSignals, repBans, repClients, repMax, repMean *prometheus.Desc

	series sync.Map // limit name -> *observer

	mu       sync.Mutex
	limiters []*core.Limiter // bound, in order; append only
	bound    map[string]bool // names of limiters
	stores   []memStore      // watched, in order; append only
	reps     []*reputation.Tracker
}

// memStore is a store watched by WatchStore.
type memStore struct {
	name string
	s    interface{ Len() int }
}

var (
	_ prometheus.Collector = (*Metrics)(nil)
	_ core.Observer        = (*Metrics)(nil)
)

// healthStates are the states of ratelimit_store_health, in order.
var healthStates = []core.Health{core.Healthy, core.Recovering, core.Failing}

// storeErrorKinds are the kinds of ratelimit_store_errors_total, in the
// order of observer.storeErrors.
var storeErrorKinds = [...]string{outcome.StoreErrTimeout, outcome.StoreErrCircuitOpen, outcome.StoreErrFailed}

// New returns Metrics with no Limiter yet, or an error wrapping
// core.ErrInvalidOption when an option is nil or refuses its value.
func New(opts ...Option) (*Metrics, error) {
	c := config{buckets: latency.Buckets()}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: promlimit: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	ns, cl := namespace, prometheus.Labels(nil)
	m := &Metrics{
		decisions: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "decisions_total"),
			"Calls to a rate limiter, by limit and outcome: allowed or denied by the store; deny_cache, denied by the deny cache without asking the store; fallback_allowed or fallback_denied, decided by the fallback store while the store failed; failed_open or failed_closed, decided by the fail mode because the store failed; canceled, the caller gone before a decision; invalid, refused for bad input; shadow_denied, admitted in shadow mode though it would have been denied; locked_out, denied by a lockout after repeated denials; allow_listed or deny_listed, decided by an allow or deny list without asking the limiter.",
			[]string{"limit", "outcome"}, cl),
		nearLimit: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "near_limit_total"),
			"Requests admitted that left their client less than a fifth of the limit's capacity, by limit.",
			[]string{"limit"}, cl),
		storeErrors: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "store_errors_total"),
			"Decisions the store failed, by limit and kind: timeout, no answer within the limiter's timeout; circuit_open, the store not asked because its circuit breaker is open; error, any other failure.",
			[]string{"limit", "kind"}, cl),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:   ns,
			Name:        "store_duration_seconds",
			Help:        "Time the store took to decide a request, or was waited for until the limiter's timeout, by limit. Memory stores, which never wait, are not timed.",
			Buckets:     c.buckets,
			ConstLabels: cl,
		}, []string{"limit"}),
		health: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "store_health"),
			"The limiter's view of its store, by limit: 1 for the current state (healthy; recovering, the fallback store still vouching for its admissions; failing, the circuit breaker open), 0 for the other two.",
			[]string{"limit", "state"}, cl),
		memKeys: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "memstore_keys"),
			"Keys a memory store holds, expired ones its janitor has not yet deleted included, by store.",
			[]string{"store"}, cl),
		repSignals: prometheus.NewDesc(prometheus.BuildFQName(ns, "reputation", "signals_total"),
			"Signals a reputation scored, by kind.", []string{"signal"}, cl),
		repBans: prometheus.NewDesc(prometheus.BuildFQName(ns, "reputation", "bans_total"),
			"Bans a reputation made as clients entered a band, by band; mode=shadow counts those a reputation in shadow mode would have made.",
			[]string{"band", "mode"}, cl),
		repClients: prometheus.NewDesc(prometheus.BuildFQName(ns, "reputation", "clients"),
			"Clients whose score, as this server holds it, is in a band, by band.", []string{"band"}, cl),
		repMax: prometheus.NewDesc(prometheus.BuildFQName(ns, "reputation", "score_max"),
			"The highest score this server holds.", nil, cl),
		repMean: prometheus.NewDesc(prometheus.BuildFQName(ns, "reputation", "score_mean"),
			"The mean of the scores this server holds.", nil, cl),
		bound: make(map[string]bool),
	}
	return m, nil
}

// Bind resolves the series of l's policies, creating each at 0, and
// returns the function that counts l's decisions in them; NewLimiter
// calls it when given m by core.WithObserver. From then on, every scrape
// reports l's health too. A Limiter of
// several policies (layers) has series for each: a request counts under
// every layer that applied to it, each with that layer's own decision
// (a layer that would have admitted a request another layer denied
// counts it allowed), and the Limiter's health is reported under every
// layer. It fails when a Limiter of the same policy Name is bound
// already, since both would count in the same series.
func (m *Metrics) Bind(l *core.Limiter) (func(core.Event), error) {
	if l == nil {
		return nil, errors.New("promlimit: Bind: nil Limiter")
	}
	names := limitNames(l)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range names {
		if m.bound[name] {
			return nil, fmt.Errorf("promlimit: a Limiter of policy %q is bound already; their counts would merge: give each policy a Name of its own", name)
		}
	}
	m.limiters = append(m.limiters, l)
	if len(names) == 1 {
		m.bound[names[0]] = true
		return m.observer(names[0]).observe, nil
	}
	byName := make(map[string]*observer, len(names))
	for _, name := range names {
		m.bound[name] = true
		byName[name] = m.observer(name)
	}
	return func(e core.Event) {
		if o := byName[e.Policy.Name]; o != nil {
			o.observe(e)
		}
	}, nil
}

// limitNames returns the names l's decisions are labeled with: its
// policies'.
func limitNames(l *core.Limiter) []string {
	ps := l.Policies()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// observer returns the observer of the limit name, creating its series
// when it has none yet.
func (m *Metrics) observer(name string) *observer {
	if o, ok := m.series.Load(name); ok {
		return o.(*observer)
	}
	// Two goroutines may both get here for one name: both use the
	// observer stored first, the other one is dropped unused.
	o, _ := m.series.LoadOrStore(name, m.newObserver(name))
	return o.(*observer)
}

// newObserver returns a new observer of the limit name, every series at
// 0.
func (m *Metrics) newObserver(name string) *observer {
	return &observer{
		name:      name,
		created:   time.Now(),
		decisions: make([]counter, len(outcome.All())),
		latency:   m.latency.WithLabelValues(name),
	}
}

// WatchStore makes every scrape report what store s tells of itself,
// under the label store=name: its key count, s.Len(), as
// ratelimit_memstore_keys (a *memstore.Store has Len). It fails with an
// error wrapping core.ErrInvalidOption when s is nil, or name is empty,
// not UTF-8 or watched already.
func (m *Metrics) WatchStore(name string, s interface{ Len() int }) error {
	switch {
	case s == nil:
		return fmt.Errorf("%w: promlimit.WatchStore: nil store", core.ErrInvalidOption)
	case name == "" || !utf8.ValidString(name):
		return fmt.Errorf("%w: promlimit.WatchStore: store name %q is empty or not UTF-8", core.ErrInvalidOption, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.stores {
		if w.name == name {
			return fmt.Errorf("%w: promlimit.WatchStore: a store named %q is watched already", core.ErrInvalidOption, name)
		}
	}
	m.stores = append(m.stores, memStore{name, s})
	return nil
}

// WatchReputation makes every scrape report what t has scored and done:
// ratelimit_reputation_signals_total by signal,
// ratelimit_reputation_bans_total by band and mode (enforced, or shadow
// for the bans a Tracker in shadow mode would have made),
// ratelimit_reputation_clients by band, and the highest and mean score
// held, ratelimit_reputation_score_max and _score_mean, which the alert
// for a client far above the rest compares. The client counts and scores
// are those this server holds (on Redis, the copy its own signals keep):
// sum or max them across servers. Reading them walks the scores held
// (100,000 at most) at each scrape. A nil t is an error wrapping
// core.ErrInvalidOption; watch one Tracker per Metrics.
func (m *Metrics) WatchReputation(t *reputation.Tracker) error {
	if t == nil {
		return fmt.Errorf("%w: promlimit.WatchReputation: nil Tracker", core.ErrInvalidOption)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.reps) > 0 {
		return fmt.Errorf("%w: promlimit.WatchReputation: a Tracker is watched already", core.ErrInvalidOption)
	}
	m.reps = append(m.reps, t)
	return nil
}

// Describe sends the descriptors of every metric m reports, as
// prometheus.Collector asks.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.decisions
	ch <- m.nearLimit
	ch <- m.storeErrors
	m.latency.Describe(ch)
	ch <- m.health
	ch <- m.memKeys
	ch <- m.repSignals
	ch <- m.repBans
	ch <- m.repClients
	ch <- m.repMax
	ch <- m.repMean
}

// Collect sends the counters and histograms as they stand, and reads the
// gauges: each bound Limiter's Health, each watched store's Len.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, c *counter, o *observer, labels ...string) {
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(d, prometheus.CounterValue, float64(c.value()), o.created, labels...)
	}
	m.series.Range(func(_, v any) bool {
		o := v.(*observer)
		for i := range o.decisions {
			counter(m.decisions, &o.decisions[i], o, o.name, outcome.Outcome(i).String())
		}
		counter(m.nearLimit, &o.nearLimit, o, o.name)
		for i, kind := range storeErrorKinds {
			counter(m.storeErrors, &o.storeErrors[i], o, o.name, kind)
		}
		return true
	})
	m.latency.Collect(ch)

	m.mu.Lock()
	limiters, stores, reps := m.limiters, m.stores, m.reps // append only: a snapshot
	m.mu.Unlock()
	for _, l := range limiters {
		h := l.Health()
		for _, name := range limitNames(l) { // a layered Limiter's health is each layer's
			for _, s := range healthStates {
				v := 0.0
				if s == h {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(m.health, prometheus.GaugeValue, v, name, s.String())
			}
		}
	}
	for _, s := range stores {
		ch <- prometheus.MustNewConstMetric(m.memKeys, prometheus.GaugeValue, float64(s.s.Len()), s.name)
	}
	for _, t := range reps {
		st := t.Stats()
		for s, n := range st.Signals {
			ch <- prometheus.MustNewConstMetric(m.repSignals, prometheus.CounterValue, float64(n), s.String())
		}
		shadow := t.Config().Shadow
		for _, b := range st.Bands {
			enforced, shadowed := b.Bans, uint64(0)
			if shadow {
				enforced, shadowed = 0, b.Bans
			}
			ch <- prometheus.MustNewConstMetric(m.repBans, prometheus.CounterValue, float64(enforced), b.Name, "enforced")
			ch <- prometheus.MustNewConstMetric(m.repBans, prometheus.CounterValue, float64(shadowed), b.Name, "shadow")
			ch <- prometheus.MustNewConstMetric(m.repClients, prometheus.GaugeValue, float64(b.Clients), b.Name)
		}
		ch <- prometheus.MustNewConstMetric(m.repMax, prometheus.GaugeValue, st.MaxScore)
		ch <- prometheus.MustNewConstMetric(m.repMean, prometheus.GaugeValue, st.MeanScore)
	}
}

// observer counts the events of one limit in its series, resolved once.
type observer struct {
	name        string
	created     time.Time
	decisions   []counter // by outcome.Outcome
	nearLimit   counter
	storeErrors [len(storeErrorKinds)]counter // by storeErrorKinds
	latency     prometheus.Observer
}

// observe counts e: an atomic addition or two, on counters resolved by
// Bind.
func (o *observer) observe(e core.Event) {
	s := stripeOf(e.Key)
	if oc := outcome.Of(&e.Decision); int(oc) < len(o.decisions) {
		o.decisions[oc].inc(s)
	}
	if outcome.NearLimit(&e.Decision) {
		o.nearLimit.inc(s)
	}
	if e.StoreLatency > 0 {
		o.latency.Observe(e.StoreLatency.Seconds())
	}
	if e.Err != nil {
		o.storeError(e.Err, s)
	}
}

// storeError counts err by its kind, when it is a store failure.
func (o *observer) storeError(err error, s uint32) {
	switch outcome.StoreErrorKind(err) {
	case outcome.StoreErrTimeout:
		o.storeErrors[0].inc(s)
	case outcome.StoreErrCircuitOpen:
		o.storeErrors[1].inc(s)
	case outcome.StoreErrFailed:
		o.storeErrors[2].inc(s)
	}
}

// stripes is the number of stripes of a counter, 1<<stripeBits.
const (
	stripeBits = 3
	stripes    = 1 << stripeBits
)

// counter is a monotonic count striped over cache lines. A Prometheus
// counter is one atomic word: every core deciding for the same limit
// would pull its cache line back and forth, which, in a benchmark of
// Allow on two cores, costs more than the rest of Observe. Decisions for
// different clients mostly land on different stripes; a scrape adds them
// up.
type counter struct {
	stripes [stripes]struct {
		n atomic.Uint64
		_ [56]byte // to the next 64-byte cache line
	}
}

// inc adds 1 to stripe s, in [0, stripes).
func (c *counter) inc(s uint32) { c.stripes[s%stripes].n.Add(1) }

// value returns the count.
func (c *counter) value() uint64 {
	var n uint64
	for i := range c.stripes {
		n += c.stripes[i].n.Load()
	}
	return n
}

// stripeOf picks the stripe of a client's key from a few of its bytes:
// cheaper than hashing it all, and enough to spread keys that differ near
// their end or middle (IPv4 addresses, IPv6 prefixes, hashed API keys,
// route and IP, user IDs). Concurrent decisions for one client share a
// stripe, as they share the client's state in the store.
func stripeOf(key string) uint32 {
	n := len(key)
	var h uint32
	if n < 9 {
		for i := range n {
			h = h*31 + uint32(key[i])
		}
	} else {
		h = uint32(key[n-1]) | uint32(key[n-2])<<8 | uint32(key[n-3])<<16 | uint32(key[n-6])<<24
		h ^= uint32(key[n-7]) | uint32(key[n-8])<<8 | uint32(key[n-9])<<16 | uint32(key[n/2])<<24
	}
	return (h * 0x9E3779B1) >> (32 - stripeBits) // Fibonacci hashing: the top bits
}
