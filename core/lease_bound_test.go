package core_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// TestLeaseBoundSearch searches for a counter-example to the bound that
// core/lease.go states: fleets of Limiters over one memory store, a leased
// layer (and often a second layer, leased or not, that denies), driven by
// seeded adversarial arrivals on a virtual clock. Every layer's key is
// checked against its algorithm's own invariant, computed from the
// admissions' true times (to the microsecond, as the stores date them),
// with refunded admissions taken out from the moment of their refund:
//
//   - FixedWindow: at every admission the window's count is at most the
//     Limit;
//   - SlidingWindowCounter: likewise, and the sliding estimate
//     prev*(1-frac)+cur is at most the Limit;
//   - TokenBucket: the admissions in every interval [a, b] are at most
//     Burst + rate*(b-a) + rate*Lease (Lease 0 for a layer not leased).
//
// LEASE_BOUND_SCENARIOS=n searches n scenarios (the default is a few
// seconds' worth); LEASE_BOUND_SEED=s runs scenario s alone.
func TestLeaseBoundSearch(t *testing.T) {
	n := uint64(240)
	if raceEnabled || testing.Short() {
		n = 30
	}
	first := uint64(1)
	if v := os.Getenv("LEASE_BOUND_SCENARIOS"); v != "" {
		k, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "LEASE_BOUND_SCENARIOS")
		n = k
	}
	if v := os.Getenv("LEASE_BOUND_SEED"); v != "" {
		k, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "LEASE_BOUND_SEED")
		first, n = k, 1
	}
	start := time.Now()
	var requests, lease int
	for seed := first; seed < first+n; seed++ {
		s := newBoundScenario(t, seed)
		bad := s.run()
		if bad == "" {
			bad = s.finish()
		}
		if bad != "" {
			t.Fatalf("seed %d (rerun with LEASE_BOUND_SEED=%d): %s\nscenario: %s", seed, seed, bad, s)
		}
		requests += s.requests
		lease += s.fromLease
	}
	t.Logf("%d scenarios, %d requests (%d decided from a lease), %v", n, requests, lease, time.Since(start).Round(time.Millisecond))
}

// boundScenario is one search: its fleet, its layers, and the truth kept
// for every layer's keys.
type boundScenario struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	policies []core.Policy
	servers  []*core.Limiter
	clients  int
	now      time.Time
	truth    map[string]*boundTruth // layer index and key
	admitted []boundAdmission       // not yet refunded
	refunds  float64                // the chance that a request is preceded by a refund
	requests int
	// fromLease counts the decisions SourceLease made.
	fromLease int
}

// boundAdmission is an admission the scenario may refund.
type boundAdmission struct {
	took time.Time
	reqs []core.Request
	refs []*boundEntry // per request, nil for a layer not checked
}

// boundPolicy picks a policy of alg for a layer, leased or not.
func boundPolicy(rng *rand.Rand, name string, alg core.Algorithm, leased bool) core.Policy {
	windows := []time.Duration{50 * time.Millisecond, time.Second, 1300 * time.Millisecond, time.Minute}
	limits := []int64{1, 2, 3, 7, 20, 100, 1000}
	p := core.Policy{Name: name, Algorithm: alg, Window: windows[rng.IntN(len(windows))], Limit: limits[rng.IntN(len(limits))]}
	if alg == core.TokenBucket && rng.IntN(2) == 0 {
		p.Burst = 1 + rng.Int64N(2*p.Limit)
	}
	if !leased {
		return p
	}
	switch rng.IntN(4) {
	case 0:
		p.Lease = time.Millisecond
	case 1:
		p.Lease = p.Window
	case 2:
		p.Lease = p.Window / time.Duration(2+rng.IntN(9))
	default:
		p.Lease = time.Duration(rng.Int64N(int64(p.Window)))
	}
	p.Lease = max(p.Lease, time.Millisecond)
	return p
}

func newBoundScenario(t *testing.T, seed uint64) *boundScenario {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	algs := []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter, core.TokenBucket}
	s := &boundScenario{t: t, seed: seed, rng: rng, clients: 1 + rng.IntN(6), now: leaseT0, truth: map[string]*boundTruth{}}
	s.policies = []core.Policy{boundPolicy(rng, "global", algs[seed%3], true)}
	if rng.IntN(3) > 0 {
		// A second layer, per client, that denies now and then.
		q := boundPolicy(rng, "client", algs[rng.IntN(3)], rng.IntN(2) == 0)
		q.Limit = min(q.Limit, 1+rng.Int64N(20))
		q.Burst = min(q.Burst, q.Limit)
		if rng.IntN(2) == 0 {
			s.policies = append(s.policies, q)
		} else {
			s.policies = append([]core.Policy{q}, s.policies...)
		}
	}
	if rng.IntN(3) > 0 {
		s.refunds = rng.Float64() * 0.3
	}
	var store core.Store = newMemStore(t)
	if rng.IntN(2) == 0 {
		store = microStore{store} // dates its takes as the Redis store does
	}
	s.servers = fleet(t, store, 1+rng.IntN(12), s.policies...)
	return s
}

func (s *boundScenario) String() string {
	return fmt.Sprintf("%d servers, %d clients, refunds %.2f, policies %+v", len(s.servers), s.clients, s.refunds, s.policies)
}

// window is the longest Window of the scenario's layers.
func (s *boundScenario) window() time.Duration {
	w := time.Duration(0)
	for _, p := range s.policies {
		w = max(w, p.Window)
	}
	return w
}

// run plays phases of adversarial traffic, and returns the first
// violation found, or "".
func (s *boundScenario) run() string {
	rng := s.rng
	for range 8 + rng.IntN(16) {
		var bad string
		switch rng.IntN(7) {
		case 0:
			bad = s.edges()
		case 1:
			bad = s.hot(rng.IntN(len(s.servers)), len(s.servers), 1)
		case 2:
			// Idle: grants expire, windows pass.
			s.advance(time.Duration(rng.Int64N(int64(3 * s.window()))))
		case 3:
			for range 1 + rng.IntN(6) { // traffic jumps between servers
				if bad = s.hot(rng.IntN(len(s.servers)), 1, 1); bad != "" {
					break
				}
			}
		case 4:
			bad = s.hot(rng.IntN(len(s.servers)), 1+rng.IntN(len(s.servers)), 0)
		case 5:
			bad = s.boundaries()
		default:
			for range 1 + rng.IntN(8) {
				s.refund()
			}
			bad = s.hot(0, len(s.servers), 1)
		}
		if bad != "" {
			return bad
		}
	}
	return ""
}

// advance moves the virtual clock on by d.
func (s *boundScenario) advance(d time.Duration) { s.now = s.now.Add(max(d, 0)) }

// hot sends bursts from servers [from, from+n) (mod the fleet) for a
// while, each request of cost 1 when unit, else up to the capacity.
func (s *boundScenario) hot(from, n int, unit int) string {
	rng := s.rng
	span := s.policies[rng.IntN(len(s.policies))].Window
	steps := 5 + rng.IntN(40)
	for range steps {
		for range 1 + rng.IntN(4*n) {
			if bad := s.request((from+rng.IntN(n))%len(s.servers), s.cost(unit)); bad != "" {
				return bad
			}
		}
		s.advance(time.Duration(rng.Int64N(int64(span) / int64(steps) * 2)))
	}
	return ""
}

// edges sends bursts around the next end of a layer's window, from a
// microsecond before it to a microsecond after, to the nanosecond.
func (s *boundScenario) edges() string {
	rng := s.rng
	w := s.policies[rng.IntN(len(s.policies))].Window
	end := s.now.Truncate(w).Add(w)
	s.now = end.Add(-time.Duration(1 + rng.IntN(int(min(w, time.Millisecond)))))
	for _, off := range []time.Duration{-1500, -1001, -1000, -999, -500, -1, 0, 1, 500, 999, 1000, 1001} {
		if at := end.Add(off); at.After(s.now) {
			s.now = at
		}
		for range 1 + rng.IntN(3*len(s.servers)) {
			if bad := s.request(rng.IntN(len(s.servers)), s.cost(1)); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// boundaries sends requests exactly at window boundaries, and a
// nanosecond either side, over a few windows.
func (s *boundScenario) boundaries() string {
	rng := s.rng
	w := s.policies[rng.IntN(len(s.policies))].Window
	for range 1 + rng.IntN(4) {
		end := s.now.Truncate(w).Add(w)
		for _, off := range []time.Duration{-1, 0, 1} {
			if at := end.Add(off); at.After(s.now) {
				s.now = at
			}
			for range 1 + rng.IntN(2*len(s.servers)) {
				if bad := s.request(rng.IntN(len(s.servers)), s.cost(0)); bad != "" {
					return bad
				}
			}
		}
	}
	return ""
}

// cost is a request's cost: mostly 1, else up to the global layer's
// capacity (or 1 when unit is 1 and the dice say so).
func (s *boundScenario) cost(unit int) int64 {
	if unit == 1 && s.rng.IntN(4) > 0 || s.rng.IntN(3) == 0 {
		return 1
	}
	g := s.policies[len(s.policies)-1]
	if g.Name != "global" {
		g = s.policies[0]
	}
	c := g.Limit
	if g.Burst > 0 {
		c = g.Burst
	}
	return 1 + s.rng.Int64N(c)
}

// request asks server i to admit a request of cost (on the global layer;
// 1 on the client layer), checks each admission against the truth, and
// returns the first violation, or "".
func (s *boundScenario) request(i int, cost int64) string {
	if s.refunds > 0 && s.rng.Float64() < s.refunds {
		s.refund()
	}
	client := fmt.Sprint("c", s.rng.IntN(s.clients))
	reqs := make([]core.Request, len(s.policies))
	for j, p := range s.policies {
		reqs[j] = core.Request{Key: "api", Cost: cost}
		if p.Name == "client" {
			reqs[j] = core.Request{Key: client, Cost: 1}
		}
	}
	d, took, err := s.servers[i].AllowLayers(context.Background(), s.now, reqs, nil)
	require.NoError(s.t, err, "seed %d", s.seed)
	require.NoError(s.t, d.Err, "seed %d", s.seed)
	s.requests++
	if d.Source == core.SourceLease {
		s.fromLease++
	}
	if !d.Allowed {
		return ""
	}
	require.False(s.t, took.IsZero(), "seed %d: an admission without a time", s.seed)
	a := boundAdmission{took: took, reqs: reqs, refs: make([]*boundEntry, len(reqs))}
	for j := range reqs {
		tr := s.truthOf(j, reqs[j].Key)
		e, bad := tr.admit(s.now, reqs[j].Cost)
		if bad != "" {
			return fmt.Sprintf("server %d at %v: layer %q key %q: %s", i, s.now.Sub(leaseT0), s.policies[j].Name, reqs[j].Key, bad)
		}
		a.refs[j] = e
	}
	s.admitted = append(s.admitted, a)
	return ""
}

// refund refunds a random admission not yet refunded, on every layer or
// on one, through the server that made it (any server: they share the
// store).
func (s *boundScenario) refund() {
	if len(s.admitted) == 0 {
		return
	}
	k := len(s.admitted) - 1 - s.rng.IntN(min(len(s.admitted), 64))
	a := s.admitted[k]
	s.admitted = append(s.admitted[:k], s.admitted[k+1:]...)
	reqs := append([]core.Request(nil), a.reqs...)
	if len(reqs) > 1 && s.rng.IntN(2) == 0 {
		reqs[s.rng.IntN(len(reqs))].Key = "" // that layer keeps its units
	}
	l := s.servers[s.rng.IntN(len(s.servers))]
	require.NoError(s.t, l.Refund(context.Background(), a.took, reqs), "seed %d", s.seed)
	for j := range reqs {
		if reqs[j].Key != "" {
			s.truthOf(j, reqs[j].Key).refund(a.refs[j], s.now)
		}
	}
}

func (s *boundScenario) truthOf(layer int, key string) *boundTruth {
	k := fmt.Sprint(layer, "/", key)
	tr := s.truth[k]
	if tr == nil {
		tr = &boundTruth{p: s.policies[layer], net: map[int64]int64{}}
		s.truth[k] = tr
	}
	return tr
}

// finish checks what can only be checked at the end (the token buckets'
// intervals), and returns the first violation, or "".
func (s *boundScenario) finish() string {
	for k, tr := range s.truth {
		if bad := tr.finish(); bad != "" {
			return fmt.Sprintf("layer/key %s: %s", k, bad)
		}
	}
	return ""
}

// boundEntry is one layer's part of an admission.
type boundEntry struct {
	us       int64 // when, in Unix microseconds (as the stores date)
	cost     int64
	refunded bool
}

// boundTruth is what a layer's key admitted, by the admissions' true
// times.
type boundTruth struct {
	p       core.Policy
	net     map[int64]int64 // window index -> units admitted, less refunds
	entries []*boundEntry
}

// admit records an admission of cost at at, and returns it and the
// violation it makes, if any.
func (tr *boundTruth) admit(at time.Time, cost int64) (*boundEntry, string) {
	e := &boundEntry{us: at.UnixMicro(), cost: cost}
	tr.entries = append(tr.entries, e)
	if tr.p.Algorithm == core.TokenBucket {
		return e, ""
	}
	w, l := tr.p.Window.Microseconds(), tr.p.Limit
	i := floorDiv(e.us, w)
	tr.net[i] += cost
	if tr.net[i] > l {
		return e, fmt.Sprintf("window %d holds %d, limit %d", i, tr.net[i], l)
	}
	if tr.p.Algorithm == core.SlidingWindowCounter {
		// prev*(w-el)/w + cur <= l, times w, in integers; the stores
		// round in float64, so the slack of a billionth.
		el := e.us - i*w
		sum := tr.net[i-1]*(w-el) + tr.net[i]*w
		if sum > l*w+max(1, l*w/1e9) {
			return e, fmt.Sprintf("sliding estimate %.6f (prev %d, cur %d, %d of %d µs in), limit %d",
				float64(sum)/float64(w), tr.net[i-1], tr.net[i], el, w, l)
		}
	}
	return e, ""
}

// refund takes e out of the truth, from now on.
func (tr *boundTruth) refund(e *boundEntry, _ time.Time) {
	if e == nil || e.refunded {
		return
	}
	e.refunded = true
	if tr.p.Algorithm != core.TokenBucket {
		tr.net[floorDiv(e.us, tr.p.Window.Microseconds())] -= e.cost
	}
}

// finish checks a token bucket's intervals: for every [a, b] between two
// admissions, sum <= Burst + rate*(b-a) + rate*Lease. Times are the
// stores' microseconds; a grant's lifetime, counted in nanoseconds, spans
// at most a microsecond more of them.
func (tr *boundTruth) finish() string {
	if tr.p.Algorithm != core.TokenBucket {
		return ""
	}
	w, l := tr.p.Window.Microseconds(), tr.p.Limit
	capacity := l
	if tr.p.Burst > 0 {
		capacity = tr.p.Burst
	}
	lease := int64(0)
	if tr.p.Lease > 0 {
		lease = (int64(tr.p.Lease)+999)/1000 + 1
	}
	// Times w: (S_j - S_{i-1})*w - l*(t_j - t_i) <= capacity*w + l*lease.
	limit := capacity*w + l*lease + max(1, capacity*w/1e9)
	var sum int64
	var low int64 // min over i <= j of S_{i-1}*w + ... - see below
	lowAt := -1
	for j, e := range tr.entries {
		if e.refunded {
			continue
		}
		if b := sum*w - l*e.us; lowAt < 0 || b < low {
			low, lowAt = b, j
		}
		sum += e.cost
		if a := sum*w - l*e.us; a-low > limit {
			return fmt.Sprintf("token bucket: %d µs from admission %d to %d admitted %.3f units more than Burst %d + rate*(b-a) + rate*Lease (%d µs)",
				e.us-tr.entries[lowAt].us, lowAt, j, float64(a-low-limit)/float64(w), capacity, lease)
		}
	}
	return ""
}

// floorDiv is a/b rounded down.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
