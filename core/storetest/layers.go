package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// runLayers runs the cases of core.Store.Take of several requests against
// the store
// newStore returns. Run calls it.
//
// For every algorithm, as the layer that denies and among the layers that
// admit: a request denied by one layer records nothing in the others (each
// is then compared, decision by decision, with a twin that never saw the
// denied request), and their Decisions are those they would have had had
// the request been taken; a denial under a lockout (core.Policy.Lockout) keeps its strike,
// and the lockout denies later layered requests. Bad input is an error
// that records nothing: two requests with one Key and Policy.Name, len(out)
// not len(reqs), more than 16 requests, an invalid request.
// Every call has an explicit now, which the store decides at.
func runLayers(t *testing.T, newStore func(t *testing.T) core.Store) {
	t.Helper()
	t.Run("layers", func(t *testing.T) {
		run := runID(testingT{t})
		multi := newStore
		for _, alg := range limits.Algorithms[core.Algorithm]() {
			t.Run(string(alg), func(t *testing.T) {
				t.Run("all-or-nothing", func(t *testing.T) {
					testAllOrNothing(t, multi(t), run+"-aon", alg, nil)
				})
				t.Run("lockout", func(t *testing.T) {
					lo := &lockoutOf{30 * time.Second, 2 * time.Minute, 5 * time.Minute}
					testAllOrNothing(t, multi(t), run+"-lo", alg, lo)
				})
			})
		}
		t.Run("rolled-back-decisions", func(t *testing.T) {
			testRolledBack(t, multi(t), run+"-rb")
		})
		t.Run("bad-input", func(t *testing.T) {
			testLayersBadInput(t, multi(t), run+"-bad")
		})
		t.Run("explicit-now", func(t *testing.T) {
			testLayersNow(t, multi(t), run+"-now")
		})
		t.Run("peeks", func(t *testing.T) {
			testLayersPeek(t, multi(t), run+"-peek")
		})
	})
}

// layerPolicy is a policy of alg named name, limit per window, a bucket of
// limit for the buckets.
func layerPolicy(name string, alg core.Algorithm, limit int64, window time.Duration) core.Policy {
	p := core.Policy{Name: name, Algorithm: alg, Limit: limit, Window: window}
	if limits.IsBucket(alg) {
		p.Burst = limit
	}
	return p
}

// takeAll calls Take of reqs and fails t on an error.
func takeAll(t *testing.T, s core.Store, now time.Time, reqs []core.Request) []core.Decision {
	t.Helper()
	out := make([]core.Decision, len(reqs))
	if _, err := s.Take(context.Background(), now, reqs, out); err != nil {
		t.Fatalf("Take(%s): %v", showReqs(reqs), err)
	}
	return out
}

// showReqs names reqs for a failure message.
func showReqs(reqs []core.Request) string {
	s := "["
	for i, r := range reqs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s/%s cost %d", r.Policy.Name, r.Key, r.Cost)
	}
	return s + "]"
}

// testAllOrNothing is one all-or-nothing case: five layers that admit, one
// of each algorithm (1000 per 10s), and a layer of alg that admits 2 per
// 10s, with lockout when not nil, decided together at one boundary of
// every window (t0). The third request, at t0+1s, is denied by alg's
// layer alone. Three clients see the five admitting layers: main sees
// every request, twin only the two admitted ones, and asIf those and the
// third as well. The third's Decisions must be asIf's; afterwards main and
// twin must decide every request alike.
func testAllOrNothing(t *testing.T, s core.Store, run string, alg core.Algorithm, lockout *lockoutOf) {
	t0 := epoch()
	algs := limits.Algorithms[core.Algorithm]()
	big := func(who string) []core.Request {
		var reqs []core.Request
		for i, a := range algs {
			p := layerPolicy("room-"+strconv.Itoa(i), a, 1000, 10*time.Second)
			reqs = append(reqs, core.Request{Key: run + "-" + string(alg) + "-" + who, Policy: p, Cost: 3})
		}
		return reqs
	}
	main, twin, asIf := big("main"), big("twin"), big("asif")
	tight := layerPolicy("tight", alg, 2, 10*time.Second)
	tight.Burst = 0
	lockout.set(&tight)
	deny := core.Request{Key: run + "-" + string(alg) + "-main", Policy: tight, Cost: 1}
	all := append(append([]core.Request(nil), main...), deny)
	last := len(all) - 1

	for i := range 2 {
		got := takeAll(t, s, t0, all)
		for j, d := range got {
			if !d.Allowed {
				t.Fatalf("request %d at t0, layer %s: %s, want allowed", i, all[j].Policy.Name, show(d))
			}
		}
		takeAll(t, s, t0, twin)
		takeAll(t, s, t0, asIf)
	}

	t1 := t0.Add(time.Second)
	got := takeAll(t, s, t1, all)
	want := takeAll(t, s, t1, asIf)
	if d := got[last]; d.Allowed || (lockout != nil) != d.LockedOut {
		t.Fatalf("request 2 at t0+1s, the layer that admits 2: %s, want denied (locked out: %v)", show(d), lockout != nil)
	}
	if lockout != nil && got[last].RetryAfter != lockout.first {
		t.Fatalf("request 2 at t0+1s, the layer with a lockout: %s, want locked out for %v", show(got[last]), lockout.first)
	}
	for j := range main {
		if !sameDecision(got[j], want[j], false) {
			t.Errorf("request 2 at t0+1s (denied by another layer), layer %s (%s):\n got %s\nwant %s, as if it had been taken", main[j].Policy.Name, main[j].Policy.Algorithm, show(got[j]), show(want[j]))
		}
	}

	if lockout != nil {
		// The strike is kept: the lockout denies every layered request
		// until it ends, and the next offence is a second one.
		t2 := t0.Add(11 * time.Second)
		got := takeAll(t, s, t2, all)
		if d := got[last]; d.Allowed || !d.LockedOut || d.RetryAfter != 20*time.Second {
			t.Fatalf("request at t0+11s, within the lockout: %s, want locked out for 20s", show(d))
		}
		t3 := t0.Add(31 * time.Second) // the lockout has ended; the quota is whole
		for i := range 3 {
			got := takeAll(t, s, t3, all)
			d := got[last]
			switch {
			case i < 2 && !d.Allowed:
				t.Fatalf("request %d at t0+31s, after the lockout: %s, want allowed", i, show(d))
			case i == 2 && (d.Allowed || !d.LockedOut || d.RetryAfter != 2*lockout.first):
				t.Fatalf("request %d at t0+31s, a second offence: %s, want locked out for %v (the first strike kept)", i, show(d), 2*lockout.first)
			}
			if i < 2 {
				takeAll(t, s, t3, twin)
			}
		}
	}

	// main, which took the denied requests in no layer but the ones
	// denying them, decides like twin, which never saw them.
	for _, off := range []time.Duration{time.Second, 2 * time.Second, 32 * time.Second, 45 * time.Second, 2 * time.Minute} {
		now := t0.Add(off)
		for j := range main {
			g := takeAll(t, s, now, main[j:j+1])[0]
			w := takeAll(t, s, now, twin[j:j+1])[0]
			if !sameDecision(g, w, false) {
				t.Errorf("at t0+%v, layer %s (%s), after requests another layer denied:\n got %s\nwant %s, as for a client that never made them", off, main[j].Policy.Name, main[j].Policy.Algorithm, show(g), show(w))
			}
		}
	}
}

// testRolledBack checks, by hand, the Decisions of layers that admitted a
// request another denied: Allowed, with what they would have left had
// they taken it, and no unit taken.
func testRolledBack(t *testing.T, s core.Store, run string) {
	t0 := epoch()
	wide := layerPolicy("wide", core.FixedWindow, 10, 10*time.Second)
	narrow := layerPolicy("narrow", core.FixedWindow, 1, 10*time.Second)
	reqs := []core.Request{
		{Key: run + "-a", Policy: wide, Cost: 2},
		{Key: run + "-a", Policy: narrow, Cost: 1},
	}
	check := func(what string, got, want core.Decision) {
		t.Helper()
		if want.Limit == 0 {
			want.Limit = 10
		}
		if !sameDecision(got, want, false) {
			t.Fatalf("%s:\n got %s\nwant %s", what, show(got), show(want))
		}
	}
	got := takeAll(t, s, t0, reqs)
	check("first request, wide layer", got[0], ok(8, 10*time.Second))
	check("first request, narrow layer", got[1], core.Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 10 * time.Second})
	t4 := t0.Add(4 * time.Second)
	got = takeAll(t, s, t4, reqs)
	check("second request (the narrow layer denies), wide layer", got[0], ok(6, 6*time.Second))
	check("second request, narrow layer", got[1], core.Decision{Limit: 1, Remaining: 0, ResetAfter: 6 * time.Second, RetryAfter: 6 * time.Second})
	got = takeAll(t, s, t4, reqs[:1])
	check("the wide layer alone, after the second request took nothing", got[0], ok(6, 6*time.Second))
}

// testLayersBadInput checks that bad input is an error and records
// nothing, not even the valid requests beside it.
func testLayersBadInput(t *testing.T, s core.Store, run string) {
	t0 := epoch()
	p := layerPolicy("bad", core.FixedWindow, 5, 10*time.Second)
	good := core.Request{Key: run + "-good", Policy: p, Cost: 1}
	other := p
	other.Algorithm = core.TokenBucket
	other.Burst = 5
	many := make([]core.Request, limits.MaxLayers+1)
	for i := range many {
		many[i] = good
		many[i].Key += "-" + strconv.Itoa(i)
	}
	many[0] = good
	with := func(f func(r *core.Request)) []core.Request {
		r := good
		r.Key = run + "-other"
		f(&r)
		return []core.Request{good, r}
	}
	cases := []struct {
		name string
		reqs []core.Request
		nOut int // -1: len(reqs)
		is   error
	}{
		{"duplicate", []core.Request{good, good}, -1, nil},
		{"duplicate-key-and-name-other-algorithm", with(func(r *core.Request) { r.Key, r.Policy = good.Key, other }), -1, nil},
		{"short-out", with(func(*core.Request) {}), 1, nil},
		{"long-out", with(func(*core.Request) {}), 3, nil},
		{"more-than-MaxLayers", many, -1, nil},
		{"empty-key", with(func(r *core.Request) { r.Key = "" }), -1, core.ErrInvalidOption},
		{"zero-cost", with(func(r *core.Request) { r.Cost = 0 }), -1, core.ErrInvalidOption},
		{"cost-above-capacity", with(func(r *core.Request) { r.Cost = 6 }), -1, core.ErrInvalidOption},
		{"zero-limit", with(func(r *core.Request) { r.Policy.Limit = 0 }), -1, core.ErrInvalidOption},
		{"unknown-algorithm", with(func(r *core.Request) { r.Policy.Algorithm = "no-such" }), -1, core.ErrInvalidOption},
		{"empty-algorithm", with(func(r *core.Request) { r.Policy.Algorithm = "" }), -1, core.ErrInvalidOption},
		{"bad-lockout", with(func(r *core.Request) { r.Policy.Lockout = -time.Second }), -1, core.ErrInvalidOption},
	}
	for _, c := range cases {
		n := c.nOut
		if n < 0 {
			n = len(c.reqs)
		}
		out := make([]core.Decision, n)
		_, err := s.Take(context.Background(), t0, c.reqs, out)
		if err == nil {
			t.Errorf("%s: Take(%s) with %d decisions: no error", c.name, showReqs(c.reqs), n)
		} else if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: Take: %v, want an error wrapping %v", c.name, err, c.is)
		}
	}
	// None of them took anything, from good or the others.
	got := takeAll(t, s, t0, []core.Request{good, {Key: run + "-other", Policy: p, Cost: 1}, many[1]})
	for i, d := range got {
		if want := withLimit(ok(4, 10*time.Second), 5); !sameDecision(d, want, false) {
			t.Errorf("after the bad input, request %d: %s, want %s: bad input took nothing", i, show(d), show(want))
		}
	}
}

// testLayersNow checks that Take of several decides at the requests' Now, not at
// the store's clock.
func testLayersNow(t *testing.T, s core.Store, run string) {
	fixed := layerPolicy("now-fixed", core.FixedWindow, 10, 10*time.Second)
	tb := layerPolicy("now-bucket", core.TokenBucket, 10, 10*time.Second)
	reqs := func(now time.Time, cost int64) []core.Request {
		return []core.Request{
			{Key: run + "-k", Policy: fixed, Cost: cost},
			{Key: run + "-k", Policy: tb, Cost: cost},
		}
	}
	type want struct {
		at        time.Duration
		cost      int64
		fix, buck core.Decision
	}
	for i, w := range []want{
		{3 * time.Second, 4, ok(6, 7*time.Second), ok(6, 4*time.Second)},
		// 2 tokens back by 5s; the window is the same.
		{5 * time.Second, 4, ok(2, 5*time.Second), ok(4, 6*time.Second)},
		// A new window; the bucket whole again.
		{12 * time.Second, 3, ok(7, 8*time.Second), ok(7, 3*time.Second)},
	} {
		got := takeAll(t, s, epoch().Add(w.at), reqs(epoch().Add(w.at), w.cost))
		if !sameDecision(got[0], withLimit(w.fix, 10), false) || !sameDecision(got[1], withLimit(w.buck, 10), false) {
			t.Errorf("request %d at epoch+%v, cost %d:\n got %s %s\nwant %s %s", i, w.at, w.cost, show(got[0]), show(got[1]), show(w.fix), show(w.buck))
		}
	}
}

// withLimit returns d with Limit l.
func withLimit(d core.Decision, l int64) core.Decision {
	d.Limit = l
	return d
}

// The layers of runLayersExactness's races: their limits, within 1500
// attempts at one time.
const (
	layersAttempts = 1500
	// layersRoom is the limit of a layer that never denies: what it has
	// used is what was admitted.
	layersRoom = 100_000
)

// runLayersExactness races layered requests from goroutinesPerStore
// goroutines on each of stores (several stores sharing one backend model
// several app servers; pass one of several stores that keep their own
// state), each through a core.Limiter of its own (of several policies, two per
// store), all at one fixed time, for every algorithm. Every store must be
// a core.Store.
//
// In the one-key race every layer has the same client key: a store
// decides the four layers in one atomic step (a Redis store's keys for one
// client share a cluster slot), and must admit exactly the smallest
// layer's limit (the leaky bucket may admit one more), and charge every
// other layer exactly what was admitted: a layer with room is not charged
// for the requests another layer denied.
//
// In the spread race the layers have keys of their own (a global one,
// eight users, sixteen addresses, an endpoint that never denies): no key's
// admissions may exceed its layer's limit (the leaky bucket one more), and
// every key of every layer must have been charged exactly what it
// admitted, however many slots its keys are in: a request denied by one
// layer takes nothing from the others.
func runLayersExactness(t *testing.T, stores []core.Store, goroutinesPerStore int) {
	t.Helper()
	if len(stores) == 0 || goroutinesPerStore < 1 {
		t.Fatalf("storetest.RunConcurrent: %d stores and %d goroutines per store: want at least one of each", len(stores), goroutinesPerStore)
	}
	run := runID(testingT{t})
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg)+"/one-key", func(t *testing.T) {
			layersRace(t, stores, goroutinesPerStore, run+"-one", alg, false)
		})
		t.Run(string(alg)+"/spread", func(t *testing.T) {
			layersRace(t, stores, goroutinesPerStore, run+"-spread", alg, true)
		})
	}
}

// raceLayer is one layer of a race: its limit and how an attempt chooses
// its key.
type raceLayer struct {
	name  string
	limit int64
	keys  int // distinct keys when spread
}

// layersRace is one race of runLayersExactness.
func layersRace(t *testing.T, stores []core.Store, perStore int, run string, alg core.Algorithm, spread bool) {
	now := epoch().Add(30 * time.Minute)
	layers := []raceLayer{
		{"global", 600, 1},
		{"user", 100, 8},
		{"endpoint", layersRoom, 1},
		{"ip", 50, 16},
	}
	if !spread {
		layers = []raceLayer{{"global", 300, 1}, {"user", 200, 1}, {"endpoint", layersRoom, 1}, {"ip", 250, 1}}
	}
	spec := make([]core.Policy, len(layers))
	for i, ly := range layers {
		spec[i] = layerPolicy(ly.name, alg, ly.limit, time.Hour)
	}
	keyOf := func(layer, attempt int) string {
		if !spread {
			return run + "-" + string(alg)
		}
		return run + "-" + string(alg) + "-" + layers[layer].name + "-" + strconv.Itoa(attempt%layers[layer].keys)
	}
	const perStoreLimiters = 2
	limiters := make([]*core.Limiter, len(stores)*perStoreLimiters)
	for i := range limiters {
		// A store that does I/O is given a timeout far past any
		// decision's by its test (see Run): this race is about what is
		// admitted.
		l, err := core.NewLimiter(stores[i/perStoreLimiters], spec)
		if err != nil {
			t.Fatalf("NewLimiter: %v", err)
		}
		limiters[i] = l
	}

	n := len(stores) * perStore
	admitted := make([][]atomic.Int64, len(layers))
	for i, ly := range layers {
		admitted[i] = make([]atomic.Int64, ly.keys)
	}
	var total, errs atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range n {
		l := limiters[(g/perStore)*perStoreLimiters+g%perStoreLimiters]
		wg.Go(func() {
			<-start
			checks := make([]core.Request, len(layers))
			out := make([]core.Decision, len(layers))
			for a := g; a < layersAttempts; a += n {
				// Each layer's key is chosen by another stride, so that
				// every layer binds for some attempts.
				pick := [4]int{0, a, 0, a * 5 / 3}
				for i := range layers {
					checks[i] = core.Request{Key: keyOf(i, pick[i]), Cost: 1}
				}
				d, _, err := l.AllowLayers(context.Background(), now, checks, out)
				if err != nil || d.Err != nil {
					if errs.Add(1) == 1 {
						t.Errorf("goroutine %d: AllowLayers: %v, %v", g, err, d.Err)
					}
					continue
				}
				if !d.Allowed {
					continue
				}
				total.Add(1)
				for i := range layers {
					admitted[i][pick[i]%layers[i].keys].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()

	race := fmt.Sprintf("%d layered attempts from %d goroutines over %d store(s), %d errors, %d admitted", layersAttempts, n, len(stores), errs.Load(), total.Load())
	slack := int64(0)
	if alg == core.LeakyBucket {
		slack = 1
	}
	for i, ly := range layers {
		for k := range admitted[i] {
			if got := admitted[i][k].Load(); got > ly.limit+slack {
				t.Errorf("%s: layer %s, key %d: admitted %d, limit %d", race, ly.name, k, got, ly.limit)
			}
		}
	}
	got := total.Load()
	if !spread {
		if got < 200 || got > 200+slack {
			t.Errorf("%s: want exactly the smallest layer's limit, 200", race)
		}
	} else if got == 0 {
		t.Errorf("%s: want some admitted", race)
	}

	// What each key of each layer was charged: a probe of its whole
	// limit at the same time is denied unless nothing was, and takes
	// nothing; a denial's Remaining is what is left. Every key must have
	// been charged exactly what it admitted: nothing for the requests
	// another layer denied, whatever slots the keys are in.
	multi := stores[0]
	for i, ly := range layers {
		p := spec[i]
		for k := range admitted[i] {
			d := takeAll(t, multi, now, []core.Request{{Key: keyOf(i, k), Policy: p, Cost: ly.limit}})[0]
			charged := int64(0)
			if !d.Allowed {
				charged = ly.limit - d.Remaining
			}
			want := min(admitted[i][k].Load(), ly.limit) // the leaky bucket's one more is not in its Remaining
			if charged != want {
				t.Errorf("%s: layer %s (limit %d), key %d: charged %d, admitted %d", race, ly.name, ly.limit, k, charged, admitted[i][k].Load())
			}
		}
	}
}

// testLayersPeek checks Peek of several requests: six layers, one of each
// algorithm (4 per 10s) and a fixed window of 2 per 10s with a lockout,
// see a client make a request every 700ms. Before each, a Peek of every
// layer must tell each layer what a Peek of it alone tells, and a twin
// client making the same requests without peeks must get the same
// decisions: the peeks wrote nothing. A client never seen has whole
// quotas, and bad input to Peek is an error that writes nothing.
func testLayersPeek(t *testing.T, s core.Store, run string) {
	ctx := context.Background()
	t0 := epoch()
	var ps []core.Policy
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		ps = append(ps, layerPolicy("peek-"+string(alg), alg, 4, 10*time.Second))
	}
	lo := layerPolicy("peek-lockout", core.FixedWindow, 2, 10*time.Second)
	lo.Lockout = 5 * time.Second
	ps = append(ps, lo)
	reqs := func(key string, cost int64) []core.Request {
		rs := make([]core.Request, len(ps))
		for i, p := range ps {
			rs[i] = core.Request{Key: run + "-" + key, Policy: p, Cost: cost}
		}
		return rs
	}
	for step := range 12 {
		now := t0.Add(time.Duration(step) * 700 * time.Millisecond)
		peeks := peekAll(t, s, now, reqs("main", 1))
		for i, r := range reqs("main", 1) {
			one, err := storecall.Peek(s, ctx, now, r)
			if err != nil {
				t.Fatalf("step %d: Peek(%s): %v", step, r.Policy.Name, err)
			}
			if !sameDecision(peeks[i], one, false) {
				t.Fatalf("step %d, layer %s: a Peek of every layer %s, of it alone %s", step, r.Policy.Name, show(peeks[i]), show(one))
			}
		}
		got, want := takeAll(t, s, now, reqs("main", 1)), takeAll(t, s, now, reqs("twin", 1))
		for i := range got {
			if !sameDecision(got[i], want[i], false) {
				t.Fatalf("step %d, layer %s: after peeks %s, without %s", step, ps[i].Name, show(got[i]), show(want[i]))
			}
		}
	}
	for i, d := range peekAll(t, s, t0, reqs("never-seen", 1)) {
		c := limits.Capacity(ps[i].Algorithm, ps[i].Limit, ps[i].Burst)
		if !d.Allowed || d.Remaining != c || d.ResetAfter != 0 || d.RetryAfter != 0 || d.Delay != 0 || d.LockedOut {
			t.Fatalf("layer %s: a client never seen peeks %s, want a whole quota", ps[i].Name, show(d))
		}
	}
	bad := reqs("bad", 1)
	bad[2].Cost = 0
	if err := s.Peek(ctx, t0, bad, make([]core.Decision, len(bad))); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("Peek of a request of cost 0: %v, want an error wrapping ErrInvalidOption", err)
	}
	if err := s.Peek(ctx, t0, append(reqs("bad", 1), reqs("bad", 1)[0]), make([]core.Decision, len(bad)+1)); !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("Peek of two requests for one key and policy: %v, want an error wrapping ErrInvalidOption", err)
	}
	if d := takeAll(t, s, t0, reqs("bad", 1)); !d[0].Allowed || d[0].Remaining != 3 {
		t.Fatalf("after the refused peeks, the client's first request gets %s, want Remaining 3: a peek wrote", show(d[0]))
	}
}

// peekAll calls Peek of reqs and fails t on an error.
func peekAll(t *testing.T, s core.Store, now time.Time, reqs []core.Request) []core.Decision {
	t.Helper()
	out := make([]core.Decision, len(reqs))
	if err := s.Peek(context.Background(), now, reqs, out); err != nil {
		t.Fatalf("Peek(%s): %v", showReqs(reqs), err)
	}
	return out
}
