package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// runGiveBacks checks give-backs (Store.Refund) against twins: a client that took c units and gave g back must decide every
// later request as a twin that took only what the give-back left counted
// (c-g while the admission is still counted where it was; c once its
// window has passed, for the windows, or less the drain between the
// admission and the key's last one, for the buckets). Each case runs on
// every algorithm, with and without a lockout; a give-back never lifts a
// lockout, and one for a client with no state creates none. Layered:
// a Refund of several requests dated with the time Take returned for them
// gives back in every layer. Bad input is an error: a give-back without
// its admission's time, of a cost out of [1, capacity], of two requests
// for one key and policy, a cost below 1 in Take or Peek. Every call has an explicit now, which the store must return
// unless the key's last admission is later: a take dated before it is
// recorded at that admission, and returns it.
func runGiveBacks(t *testing.T, newStore func(t *testing.T) core.Store) {
	t.Helper()
	t.Run("give-backs", func(t *testing.T) {
		run := runID(testingT{t})
		for _, alg := range limits.Algorithms[core.Algorithm]() {
			t.Run(string(alg), func(t *testing.T) {
				for _, lo := range []*lockoutOf{nil, {30 * time.Second, 2 * time.Minute, 5 * time.Minute}} {
					name := "plain"
					if lo != nil {
						name = "lockout"
					}
					t.Run(name, func(t *testing.T) {
						for _, c := range giveBackCases(alg) {
							t.Run(c.name, func(t *testing.T) {
								c.check(t, newStore(t), run+"-"+name, alg, lo)
							})
						}
						t.Run("lockout-kept", func(t *testing.T) {
							testGiveBackLocked(t, newStore(t), run+"-"+name, alg, lo)
						})
					})
				}
			})
		}
		t.Run("layered", func(t *testing.T) {
			testGiveBackLayers(t, newStore(t), run+"-layers")
		})
		t.Run("step-back", func(t *testing.T) {
			testGiveBackStepBack(t, newStore(t), run+"-step-back")
		})
		t.Run("bad-input", func(t *testing.T) {
			testGiveBackBadInput(t, newStore(t), run+"-bad")
		})
	})
}

// gbStep is a step of a give-back case: a take of cost at t0+at, or,
// with back, a give-back of back units of the case's first admission.
type gbStep struct {
	at   time.Duration
	cost int64
	back int64
}

// gbCase is a give-back case: main's steps, and the twin's, which gives
// nothing back, and must decide every later request as main.
type gbCase struct {
	name       string
	main, twin []gbStep
}

// giveBackCases returns the cases for alg, with a policy of 10 per 10s
// (a bucket of 10).
func giveBackCases(alg core.Algorithm) []gbCase {
	bucket := limits.IsBucket(alg)
	cases := []gbCase{
		{"at-once", []gbStep{{0, 5, 0}, {0, 0, 3}}, []gbStep{{0, 2, 0}}},
		{"all-of-it", []gbStep{{0, 4, 0}, {0, 0, 4}}, nil},
		{"missing-key", []gbStep{{0, 0, 3}}, nil},
	}
	// After another admission, 1s later: the buckets have drained 1 unit
	// of the first admission's since (10 per 10s), which is not given
	// back; the windows still count it all.
	kept := int64(2)
	if bucket {
		kept = 3
	}
	cases = append(cases, gbCase{"after-another", []gbStep{{0, 5, 0}, {time.Second, 1, 0}, {0, 0, 3}}, []gbStep{{0, kept, 0}, {time.Second, 1, 0}}})
	// Once the admission's window has passed, a give-back frees nothing,
	// but for the sliding counter, whose previous window still weighs.
	passed := []gbStep{{0, 5, 0}, {11 * time.Second, 1, 0}}
	switch alg {
	case core.SlidingWindowCounter:
		cases = append(cases, gbCase{"window-passed", append(passed, gbStep{0, 0, 3}), []gbStep{{0, 2, 0}, {11 * time.Second, 1, 0}}})
		cases = append(cases, gbCase{"two-windows-passed", []gbStep{{0, 5, 0}, {21 * time.Second, 1, 0}, {0, 0, 3}}, []gbStep{{0, 5, 0}, {21 * time.Second, 1, 0}}})
	default:
		cases = append(cases, gbCase{"window-passed", append(passed, gbStep{0, 0, 3}), passed})
	}
	return cases
}

// check plays c for alg, with lockout lo, and compares main with its twin
// over requests of cost 1 every 700ms for 25s.
func (c gbCase) check(t *testing.T, s core.Store, run string, alg core.Algorithm, lo *lockoutOf) {
	t.Helper()
	p := layerPolicy("gb", alg, 10, 10*time.Second)
	lo.set(&p)
	t0 := epoch()
	mainKey, twinKey := run+"-"+string(alg)+"-"+c.name+"-main", run+"-"+string(alg)+"-"+c.name+"-twin"
	var first time.Time // when main's first admission was decided
	play := func(key string, steps []gbStep) {
		for i, st := range steps {
			if st.back > 0 {
				at := first
				if at.IsZero() { // no admission: date the give-back t0
					at = t0
				}
				if err := s.Refund(context.Background(), at, []core.Request{{Key: key, Policy: p, Cost: st.back}}); err != nil {
					t.Fatalf("%s step %d: give-back of %d: %v", key, i, st.back, err)
				}
				continue
			}
			now := t0.Add(st.at)
			d, took, err := storecall.Take(s, context.Background(), now, core.Request{Key: key, Policy: p, Cost: st.cost})
			if err != nil {
				t.Fatalf("%s step %d: take of %d: %v", key, i, st.cost, err)
			}
			if !d.Allowed {
				t.Fatalf("%s step %d: take of %d at t0+%v: %s, want allowed", key, i, st.cost, st.at, show(d))
			}
			if !took.Equal(now) {
				t.Errorf("%s step %d: a take at %v returned the time %v, not the time it decided at", key, i, now, took)
			}
			if i == 0 {
				first = took
			}
		}
	}
	play(mainKey, c.main)
	first = time.Time{}
	play(twinKey, c.twin)
	late := time.Duration(0)
	for _, st := range c.main {
		late = max(late, st.at)
	}
	start := t0.Add(late + 50*time.Millisecond)
	for k := range 36 {
		now := start.Add(time.Duration(k) * 700 * time.Millisecond)
		g, _, err := storecall.Take(s, context.Background(), now, core.Request{Key: mainKey, Policy: p, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		w, _, err := storecall.Take(s, context.Background(), now, core.Request{Key: twinKey, Policy: p, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !sameDecision(g, w, false) {
			t.Fatalf("request %d at %v after t0, after the give-back:\n got %s\nwant %s, as the twin that took only what stayed counted", k, now.Sub(t0), show(g), show(w))
		}
	}
}

// testGiveBackLocked checks that a give-back lifts no lockout: a client
// locked out, given back every unit it took, is still locked out, for as
// long; without a lockout, the give-back lets it in at once.
func testGiveBackLocked(t *testing.T, s core.Store, run string, alg core.Algorithm, lo *lockoutOf) {
	p := layerPolicy("gbl", alg, 2, 10*time.Second)
	lo.set(&p)
	key := run + "-" + string(alg) + "-locked"
	t0 := epoch()
	var took time.Time
	for i := range 2 {
		d, at, err := storecall.Take(s, context.Background(), t0, core.Request{Key: key, Policy: p, Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("take %d: %s, %v", i, show(d), err)
		}
		took = at
	}
	t1 := t0.Add(time.Second)
	d, _, err := storecall.Take(s, context.Background(), t1, core.Request{Key: key, Policy: p, Cost: 1})
	if err != nil || d.Allowed || d.LockedOut != (lo != nil) {
		t.Fatalf("third take: %s, %v; want denied (locked out: %v)", show(d), err, lo != nil)
	}
	if err := s.Refund(context.Background(), took, []core.Request{{Key: key, Policy: p, Cost: 2}}); err != nil {
		t.Fatal(err)
	}
	d, _, err = storecall.Take(s, context.Background(), t1.Add(time.Millisecond), core.Request{Key: key, Policy: p, Cost: 1})
	switch {
	case err != nil:
		t.Fatal(err)
	case lo != nil && (d.Allowed || !d.LockedOut || d.RetryAfter != lo.first-time.Millisecond):
		t.Fatalf("after giving back every unit, within the lockout: %s, want still locked out for %v", show(d), lo.first-time.Millisecond)
	case lo == nil && !d.Allowed:
		t.Fatalf("after giving back every unit: %s, want allowed", show(d))
	}
}

// testGiveBackLayers takes a layer of every algorithm with one Take, gives
// back part of each with one Refund dated with the time it returned, and
// compares each layer with a twin that took the rest.
func testGiveBackLayers(t *testing.T, s core.Store, run string) {
	t0 := epoch()
	var mains, twins, backs []core.Request
	for i, alg := range limits.Algorithms[core.Algorithm]() {
		p := layerPolicy(fmt.Sprintf("gb-%d", i), alg, 10, 10*time.Second)
		mains = append(mains, core.Request{Key: run + "-main", Policy: p, Cost: 6})
		twins = append(twins, core.Request{Key: run + "-twin", Policy: p, Cost: 2})
		backs = append(backs, core.Request{Key: run + "-main", Policy: p, Cost: 4})
	}
	out := make([]core.Decision, len(mains))
	took, err := s.Take(context.Background(), t0, mains, out)
	if err != nil {
		t.Fatal(err)
	}
	if !took.Equal(t0) {
		t.Fatalf("Take at %v returned %v, not the time it decided at", t0, took)
	}
	takeAll(t, s, t0, twins)
	if err := s.Refund(context.Background(), took, backs); err != nil {
		t.Fatalf("Refund of several: %v", err)
	}
	for k := range 20 {
		now := t0.Add(time.Duration(k) * 900 * time.Millisecond)
		for j := range mains {
			g := takeAll(t, s, now, []core.Request{{Key: run + "-main", Policy: mains[j].Policy, Cost: 1}})[0]
			w := takeAll(t, s, now, []core.Request{{Key: run + "-twin", Policy: mains[j].Policy, Cost: 1}})[0]
			if !sameDecision(g, w, false) {
				t.Fatalf("layer %s at t0+%v, after a layered give-back:\n got %s\nwant %s", mains[j].Policy.Algorithm, now.Sub(t0), show(g), show(w))
			}
		}
	}
}

// testGiveBackBadInput checks that bad give-backs are errors wrapping
// core.ErrInvalidOption, and give nothing back.
func testGiveBackBadInput(t *testing.T, s core.Store, run string) {
	t0 := epoch()
	p := layerPolicy("gbb", core.FixedWindow, 10, 10*time.Second)
	key := run + "-k"
	if _, _, err := storecall.Take(s, context.Background(), t0, core.Request{Key: key, Policy: p, Cost: 5}); err != nil {
		t.Fatal(err)
	}
	bad := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, core.ErrInvalidOption) {
			t.Errorf("%s: %v, want an error wrapping core.ErrInvalidOption", what, err)
		}
	}
	ctx := context.Background()
	one := func(cost int64) []core.Request { return []core.Request{{Key: key, Policy: p, Cost: cost}} }
	bad("a give-back without its admission's time", s.Refund(ctx, time.Time{}, one(1)))
	bad("a give-back above the capacity", s.Refund(ctx, t0, one(11)))
	bad("a give-back of 0", s.Refund(ctx, t0, one(0)))
	bad("a give-back of -1", s.Refund(ctx, t0, one(-1)))
	bad("no give-back", s.Refund(ctx, t0, nil))
	bad("two give-backs for one key and policy", s.Refund(ctx, t0, append(one(1), one(1)...)))
	q := layerPolicy("gbb2", core.TokenBucket, 10, 10*time.Second)
	bad("a give-back of 1 and of 0", s.Refund(ctx, t0, []core.Request{{Key: key, Policy: p, Cost: 1}, {Key: key, Policy: q, Cost: 0}}))
	out := make([]core.Decision, 2)
	for _, c := range []int64{0, -1} {
		_, err := s.Take(ctx, t0, one(c), out[:1])
		bad(fmt.Sprintf("a take of %d", c), err)
		bad(fmt.Sprintf("a peek of %d", c), s.Peek(ctx, t0, one(c), out[:1]))
		_, err = s.Take(ctx, t0, []core.Request{{Key: key, Policy: q, Cost: 1}, {Key: key, Policy: p, Cost: c}}, out)
		bad(fmt.Sprintf("a take of 1 and of %d", c), err)
	}
	d, err := storecall.Peek(s, ctx, t0, core.Request{Key: key, Policy: p})
	if err != nil || d.Remaining != 5 {
		t.Fatalf("after the bad give-backs: %s, %v; want 5 remaining, nothing given back", show(d), err)
	}
}

// testGiveBackStepBack checks that an admission dated before its key's
// last admission (requests racing, a clock stepping back) is recorded at
// the time Take returns for it, and that a give-back dated
// with that time gives it back: for every algorithm, a take dated 2ms
// before a window's edge, on a key last admitted 1ms after it, alone and
// layered with a key that has no state, given back whole, leaves each key
// deciding as a twin that never took it.
func testGiveBackStepBack(t *testing.T, s core.Store, run string) {
	ctx := context.Background()
	t1 := epoch().Add(10*time.Second + time.Millisecond) // 10s windows: 1ms into the second
	before := t1.Add(-2 * time.Millisecond)              // the end of the first
	for i, alg := range limits.Algorithms[core.Algorithm]() {
		p := layerPolicy(fmt.Sprintf("gbs-%d", i), alg, 10, 10*time.Second)
		key := func(name string) string { return run + "-" + string(alg) + "-" + name }
		for _, k := range []string{"alone", "layered", "twin"} {
			if d, at, err := storecall.Take(s, ctx, t1, core.Request{Key: key(k), Policy: p, Cost: 5}); err != nil || !d.Allowed || !at.Equal(t1) {
				t.Fatalf("%s: take of 5 at t1: %s, %v, at %v", key(k), show(d), err, at)
			}
		}
		d, at, err := storecall.Take(s, ctx, before, core.Request{Key: key("alone"), Policy: p, Cost: 3})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: take of 3, dated 2ms before: %s, %v", key("alone"), show(d), err)
		}
		if !at.Equal(t1) {
			t.Errorf("%s: a take dated %v, decided at the key's last admission %v, returned %v", alg, before, t1, at)
		}
		if err := s.Refund(ctx, at, []core.Request{{Key: key("alone"), Policy: p, Cost: 3}}); err != nil {
			t.Fatal(err)
		}
		reqs := []core.Request{{Key: key("layered"), Policy: p, Cost: 3}, {Key: key("fresh"), Policy: p, Cost: 3}}
		out := make([]core.Decision, 2)
		at, err = s.Take(ctx, before, reqs, out)
		if err != nil || !out[0].Allowed || !out[1].Allowed {
			t.Fatalf("%s: Take of 3 and 3, dated 2ms before: %s %s, %v", alg, show(out[0]), show(out[1]), err)
		}
		if !at.Equal(t1) {
			t.Errorf("%s: a Take of two dated %v, on a key last admitted at %v, returned %v: not the one time both layers were decided at", alg, before, t1, at)
		}
		if err := s.Refund(ctx, at, reqs); err != nil {
			t.Fatal(err)
		}
		for k := range 20 {
			now := t1.Add(50*time.Millisecond + time.Duration(k)*900*time.Millisecond)
			w := takeOne(t, s, now, key("twin"), p)
			for _, name := range []string{"alone", "layered"} {
				if g := takeOne(t, s, now, key(name), p); !sameDecision(g, w, false) {
					t.Fatalf("%s at t1+%v, after the take dated before t1 was given back:\n got %s\nwant %s, as the twin that never took it", key(name), now.Sub(t1), show(g), show(w))
				}
			}
			f := takeOne(t, s, now, key("fresh"), p)
			g := takeOne(t, s, now, key("fresh-twin"), p)
			if !sameDecision(f, g, false) {
				t.Fatalf("%s at t1+%v, after the layered take was given back:\n got %s\nwant %s, as a key that never took", key("fresh"), now.Sub(t1), show(f), show(g))
			}
		}
	}
}

// takeOne is a take of cost 1 at now, failing t on an error.
func takeOne(t *testing.T, s core.Store, now time.Time, key string, p core.Policy) core.Decision {
	t.Helper()
	d, _, err := storecall.Take(s, context.Background(), now, core.Request{Key: key, Policy: p, Cost: 1})
	if err != nil {
		t.Fatalf("take at %v: %v", now, err)
	}
	return d
}
