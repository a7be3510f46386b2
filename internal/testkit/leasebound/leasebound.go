// Package leasebound searches for a counter-example to the bound that
// core/lease.go states for quota leases (core.Policy.Lease): fleets of
// Limiters over one store, a leased layer (and often a second layer,
// leased or not, that denies), driven by seeded adversarial arrivals on a
// virtual clock. Every layer's key is checked against its algorithm's own
// invariant, computed from the admissions' true times (to the
// microsecond, as the stores date them), refunded admissions taken out
// from the moment of their refund:
//
//   - FixedWindow: at every admission the window's count is at most the
//     Limit;
//   - SlidingWindowCounter: likewise, and the sliding estimate
//     prev*(1-frac)+cur is at most the Limit;
//   - TokenBucket: the admissions in every interval [a, b] are at most
//     Burst + rate*(b-a) + rate*Lease (Lease 0 for a layer not leased).
//
// The arrivals: bursts across a window's end to the nanosecond, requests
// exactly at window boundaries and a nanosecond either side, all servers
// hot, traffic jumping between servers, idle gaps in which grants expire
// and windows pass, costs up to the capacity, refunds of admissions (on
// every layer or one), and for a third of the window-algorithm scenarios
// a PolicySource that moves the global layer between two limits (each
// admission then checked against the limit in force). Each scenario is a
// seed: a failure names it. A scenario is deterministic but for a policy
// change, whose old grants go back to the store on a goroutine of their
// own (core's lease drop).
package leasebound

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// T0 starts the scenarios' virtual clock: the start of a minute, in the
// future, so that no store's janitor, sweeping by the real clock, finds
// the scenarios' state expired.
var T0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Range returns the scenarios to search: def from 1, or
// LEASE_BOUND_SCENARIOS=n of them, or LEASE_BOUND_SEED=s alone.
func Range(t *testing.T, def uint64) (first, n uint64) {
	first, n = 1, def
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
	return first, n
}

// Search runs the scenarios of seeds [first, first+n), each over a store
// of newStore's, and fails t at the first violation, naming its seed. It
// returns how many requests it made, and how many a lease decided.
func Search(t *testing.T, newStore func(*testing.T) core.Store, first, n uint64) (requests, fromLease int) {
	for seed := first; seed < first+n; seed++ {
		s := newScenario(t, seed, newStore)
		bad := s.run()
		if bad == "" {
			bad = s.finish()
		}
		if bad != "" {
			t.Fatalf("seed %d (rerun with LEASE_BOUND_SEED=%d): %s\nscenario: %s", seed, seed, bad, s)
		}
		requests += s.requests
		fromLease += s.fromLease
	}
	return requests, fromLease
}

// Micro is a real store whose Take returns the time it took at to the
// microsecond, as the Redis store does.
type Micro struct{ core.Store }

// Take is Store.Take, its time to the microsecond.
func (s Micro) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	took, err := s.Store.Take(ctx, now, reqs, out)
	if took.IsZero() {
		return took, err
	}
	return time.UnixMicro(took.UnixMicro()), err
}

// scenario is one search: its fleet, its layers, and the truth kept
// for every layer's keys.
type scenario struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	policies []core.Policy
	servers  []*core.Limiter
	clients  int
	now      time.Time
	truth    map[string]*record // layer index and key
	admitted []admission        // not yet refunded
	refunds  float64            // the chance that a request is preceded by a refund
	// plans are the global layer's limits a PolicySource moves it
	// between (windows only), none if it does not; limit is the one in
	// force.
	plans    []int64
	limit    atomic.Int64
	requests int
	// fromLease counts the decisions SourceLease made.
	fromLease int
}

// admission is an admission the scenario may refund.
type admission struct {
	took time.Time
	reqs []core.Request
	refs []*entry // per request, nil for a layer not checked
}

// pickPolicy picks a policy of alg for a layer, leased or not.
func pickPolicy(rng *rand.Rand, name string, alg core.Algorithm, leased bool) core.Policy {
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

func newScenario(t *testing.T, seed uint64, newStore func(*testing.T) core.Store) *scenario {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	algs := []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter, core.TokenBucket}
	s := &scenario{t: t, seed: seed, rng: rng, clients: 1 + rng.IntN(6), now: T0, truth: map[string]*record{}}
	s.policies = []core.Policy{pickPolicy(rng, "global", algs[seed%3], true)}
	if rng.IntN(3) > 0 {
		// A second layer, per client, that denies now and then.
		q := pickPolicy(rng, "client", algs[rng.IntN(3)], rng.IntN(2) == 0)
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
	store := newStore(t)
	if rng.IntN(2) == 0 {
		store = Micro{store} // dates its takes as the Redis store does
	}
	var opts []core.Option
	if g := s.global(); g.Algorithm != core.TokenBucket && rng.IntN(3) == 0 {
		s.plans = []int64{g.Limit, 1 + rng.Int64N(2*g.Limit)}
		s.limit.Store(g.Limit)
		opts = append(opts, core.WithPolicySource(planSource{s}))
	}
	s.servers = make([]*core.Limiter, 1+rng.IntN(12))
	for i := range s.servers {
		l, err := core.NewLimiter(store, s.policies, opts...)
		require.NoError(t, err)
		s.servers[i] = l
	}
	return s
}

func (s *scenario) String() string {
	return fmt.Sprintf("%d servers, %d clients, refunds %.2f, global plans %v, policies %+v", len(s.servers), s.clients, s.refunds, s.plans, s.policies)
}

// window is the longest Window of the scenario's layers.
func (s *scenario) window() time.Duration {
	w := time.Duration(0)
	for _, p := range s.policies {
		w = max(w, p.Window)
	}
	return w
}

// run plays phases of adversarial traffic, and returns the first
// violation found, or "".
func (s *scenario) run() string {
	rng := s.rng
	for range 8 + rng.IntN(16) {
		var bad string
		switch rng.IntN(8) {
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
		case 6:
			if s.plans != nil { // the client moves to the other plan
				s.limit.Store(s.plans[0] + s.plans[1] - s.limit.Load())
			}
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
func (s *scenario) advance(d time.Duration) { s.now = s.now.Add(max(d, 0)) }

// hot sends bursts from servers [from, from+n) (mod the fleet) for a
// while, each request of cost 1 when unit, else up to the capacity.
func (s *scenario) hot(from, n int, unit int) string {
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
func (s *scenario) edges() string {
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
func (s *scenario) boundaries() string {
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
func (s *scenario) cost(unit int) int64 {
	if unit == 1 && s.rng.IntN(4) > 0 || s.rng.IntN(3) == 0 {
		return 1
	}
	g := s.global()
	c := g.Limit
	if g.Burst > 0 {
		c = g.Burst
	}
	return 1 + s.rng.Int64N(c)
}

// request asks server i to admit a request of cost (on the global layer;
// 1 on the client layer), checks each admission against the truth, and
// returns the first violation, or "".
func (s *scenario) request(i int, cost int64) string {
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
	a := admission{took: took, reqs: reqs, refs: make([]*entry, len(reqs))}
	for j := range reqs {
		tr := s.truthOf(j, reqs[j].Key)
		limit := s.policies[j].Limit
		if s.policies[j].Name == "global" && s.plans != nil {
			limit = s.limit.Load()
		}
		e, bad := tr.admit(s.now, reqs[j].Cost, limit)
		if bad != "" {
			return fmt.Sprintf("server %d at %v: layer %q key %q: %s", i, s.now.Sub(T0), s.policies[j].Name, reqs[j].Key, bad)
		}
		a.refs[j] = e
	}
	s.admitted = append(s.admitted, a)
	return ""
}

// refund refunds a random admission not yet refunded, on every layer or
// on one, through the server that made it (any server: they share the
// store).
func (s *scenario) refund() {
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
	for j := range reqs {
		if reqs[j].Key == "api" && s.plans != nil && reqs[j].Cost > s.limit.Load() {
			return // more than the plan in force holds: Refund refuses it
		}
	}
	l := s.servers[s.rng.IntN(len(s.servers))]
	require.NoError(s.t, l.Refund(context.Background(), a.took, reqs), "seed %d", s.seed)
	for j := range reqs {
		if reqs[j].Key != "" {
			s.truthOf(j, reqs[j].Key).refund(a.refs[j], s.now)
		}
	}
}

func (s *scenario) truthOf(layer int, key string) *record {
	k := fmt.Sprint(layer, "/", key)
	tr := s.truth[k]
	if tr == nil {
		tr = &record{p: s.policies[layer], net: map[int64]int64{}}
		s.truth[k] = tr
	}
	return tr
}

// finish checks what can only be checked at the end (the token buckets'
// intervals), and returns the first violation, or "".
func (s *scenario) finish() string {
	for k, tr := range s.truth {
		if bad := tr.finish(); bad != "" {
			return fmt.Sprintf("layer/key %s: %s", k, bad)
		}
	}
	return ""
}

// global is the global layer's policy.
func (s *scenario) global() core.Policy {
	for _, p := range s.policies {
		if p.Name == "global" {
			return p
		}
	}
	panic("leasebound: no global layer")
}

// planSource moves the global layer to the plan in force: the
// PolicySource changes of a scenario with plans.
type planSource struct{ s *scenario }

func (ps planSource) Adjust(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
	if p.Name == "global" {
		p.Limit = ps.s.limit.Load()
	}
	return p, nil
}

// Fleet is n Limiters over store of policies, each an app server.
func Fleet(t testing.TB, store core.Store, n int, policies ...core.Policy) []*core.Limiter {
	t.Helper()
	ls := make([]*core.Limiter, n)
	for i := range ls {
		l, err := core.NewLimiter(store, policies)
		require.NoError(t, err)
		ls[i] = l
	}
	return ls
}
