package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// The race of runSettleExactness: settleAttempts admissions, each of a
// cost in [1, settleMaxCost], under layers of settleLimit per
// limits.MaxWindow, which never deny them (their keys take at most
// settleAttempts * settleMaxCost units).
const (
	settleAttempts = 1200
	settleMaxCost  = 8
	settleLimit    = limits.MaxLogLimit
)

// settleLayer is one layer of the settle race: its name and its number of
// client keys, one per attempt in turn.
type settleLayer struct {
	name string
	keys int
}

// settleLayers are the settle race's layers: a global layer of one key, a
// user layer of three, an address layer of two. Their keys are distinct
// client keys, in several Redis Cluster slots.
var settleLayers = []settleLayer{{"global", 1}, {"user", 3}, {"ip", 2}}

// runSettleExactness races admissions that settle, as the HTTP flow
// settles a layer that counts by the response: each goroutine, on each
// of stores (several stores sharing one backend model several app
// servers), takes a random cost on one layer (Take) or on two or three
// (Take of several), at the store's own clock, and gives a random part of
// it back (a Refund dated with the time the admission returned). At the
// end, each key of each layer must
// hold exactly the units the admissions kept: a give-back that misses
// what its admission took, because the admission was recorded at another
// time than the one returned, leaves units counted.
//
// The windows are limits.MaxWindow long, so no window passes during the
// race; the buckets drain at settleLimit per limits.MaxWindow, a
// hundredth of a unit in a race of three seconds, which the give-backs do
// not give back (core.Store.Refund) and the level loses: a bucket may show
// one unit more than the admissions kept, never less, never two.
func runSettleExactness(t *testing.T, stores []core.Store, goroutinesPerStore int) {
	t.Helper()
	if len(stores) == 0 || goroutinesPerStore < 1 {
		t.Fatalf("storetest.RunConcurrent: %d stores and %d goroutines per store: want at least one of each", len(stores), goroutinesPerStore)
	}
	run := runID(testingT{t})
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			settleRace(t, stores, goroutinesPerStore, run+"-settle-"+string(alg), alg)
		})
	}
}

// settleRace is one race of runSettleExactness.
func settleRace(t *testing.T, stores []core.Store, perStore int, run string, alg core.Algorithm) {
	keys := make([][]string, len(settleLayers))
	kept := make([][]atomic.Int64, len(settleLayers))
	policies := make([]core.Policy, len(settleLayers))
	for i, ly := range settleLayers {
		policies[i] = layerPolicy("settle-"+ly.name, alg, settleLimit, limits.MaxWindow)
		kept[i] = make([]atomic.Int64, ly.keys)
		for k := range ly.keys {
			keys[i] = append(keys[i], fmt.Sprintf("%s-%s-%d", run, ly.name, k))
		}
	}
	n := len(stores) * perStore
	var errs atomic.Int64
	fail := func(format string, args ...any) {
		if errs.Add(1) <= 3 {
			t.Errorf(format, args...)
		}
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range n {
		s := stores[g/perStore]
		wg.Go(func() {
			<-start
			rng := rand.New(rand.NewPCG(uint64(g), 0x5e771e))
			ctx := context.Background()
			var reqs, backs [3]core.Request
			var out [3]core.Decision
			var pick [3]int
			for a := g; a < settleAttempts; a += n {
				m := 1 + a%len(settleLayers) // one, two or three layers
				for i := range m {
					pick[i] = rng.IntN(settleLayers[i].keys)
					reqs[i] = core.Request{Key: keys[i][pick[i]], Policy: policies[i], Cost: 1 + rng.Int64N(settleMaxCost)}
					backs[i] = reqs[i]
					backs[i].Cost = rng.Int64N(reqs[i].Cost + 1)
				}
				at, err := s.Take(ctx, time.Time{}, reqs[:m], out[:m])
				if err != nil || at.IsZero() {
					fail("attempt %d: take of %s: %v, decided at %v", a, showReqs(reqs[:m]), err, at)
					continue
				}
				denied := false
				for i := range m {
					denied = denied || !out[i].Allowed
				}
				if denied {
					fail("attempt %d: take of %s: denied: %s", a, showReqs(reqs[:m]), show(out[0]))
					continue
				}
				// The give-backs: the layers that give nothing back are
				// left out, as the HTTP flow leaves them.
				var gives [3]core.Request
				k := 0
				for i := range m {
					kept[i][pick[i]].Add(reqs[i].Cost - backs[i].Cost)
					if backs[i].Cost > 0 {
						gives[k] = backs[i]
						k++
					}
				}
				if k > 0 {
					err = s.Refund(ctx, at, gives[:k])
				}
				if err != nil {
					fail("attempt %d: give-back of %s at %v: %v", a, showReqs(gives[:k]), at, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d errors in the race", errs.Load())
	}
	slack := int64(0)
	if limits.IsBucket(alg) {
		slack = 1
	}
	for i, ly := range settleLayers {
		for k, key := range keys[i] {
			d, err := storecall.Peek(stores[0], context.Background(), time.Time{}, core.Request{Key: key, Policy: policies[i]})
			if err != nil {
				t.Fatalf("peek at %s: %v", key, err)
			}
			used, want := d.Limit-d.Remaining, kept[i][k].Load()
			if used < want || used > want+slack {
				t.Errorf("layer %s, key %d: the store counts %d units, the admissions kept %d (a difference of %d); %d attempts from %d goroutines over %d store(s)",
					ly.name, k, used, want, used-want, settleAttempts, n, len(stores))
			}
		}
	}
}
