// Package storetest is the conformance suite every core.Store passes: the
// memory store, the Redis store, and any store a user writes.
//
// Run replays scripted requests, with explicit times, against a store and
// checks every field of every Decision, to the millisecond, against values
// derived by hand from the semantics documented on the core.Algorithm
// constants; at the ends of the valid range (limits up to 10^12,
// windows up to 366 days), where float64 loses the small terms, it
// checks that a request denied with RetryAfter R is still denied at R-1ms
// and passes at R. The lockouts of core.Policy.Lockout are scripted too, on every
// algorithm: their escalation, exact end, memory and Reset, and at the
// ends of their range. Run also plays layered requests (Take of several),
// plans (one client's usage under changing policies), peeks (Peek) and
// give-backs (Refund), and bad input, which every method refuses with an
// error wrapping core.ErrInvalidOption (see core.Request.Validate).
// RunConcurrent races many goroutines, over one store or several sharing
// a backend, against one key and checks that exactly the policy's limit is
// admitted, for single and for layered requests, and that refunds give
// back exactly what they should.
//
// A store's own test calls Run, and RunConcurrent when it can race:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) core.Store {
//			s := mystore.New()
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite never reads the store's clock: every call of Take and Peek has
// an explicit now, counted from midnight UTC on 1 January 2030, which is a
// boundary of every window the suite uses (windows are aligned to the Unix
// epoch). Every key
// starts with a prefix drawn at random for each call, so one backend (one
// Redis) may serve all cases, and reruns, without being flushed.
//
// The scripted cases are data, with their expected Decisions, kept apart
// from the suite (in this module's internal/testkit/storecasetest) so that
// its tools replay them elsewhere too: the ratelimit simulator's test does.
package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecasetest"
)

// epoch is the suite's time zero (storecasetest.Epoch), a boundary of every
// window the suite uses.
func epoch() time.Time { return storecasetest.Epoch }

// Run runs the conformance suite against the store newStore returns. The
// suite gives Take and Peek an explicit now on every call, so the store's
// own clock is never read, and uses a distinct key per case, so newStore may return the same
// store every time. newStore is called once per case, with the case's t.
func Run(t *testing.T, newStore func(t *testing.T) core.Store) {
	runSuite(testingT{t}, func(t tester) core.Store { return newStore(t.(testingT).T) })
	runLayers(t, newStore)
	runPlans(testingT{t}, func(t tester) core.Store { return newStore(t.(testingT).T) })
	runGiveBacks(t, newStore)
}

// RunConcurrent checks exactness under real concurrency, from
// goroutinesPerStore goroutines on each of stores (several stores sharing
// one backend, such as one Redis reached by several clients, model several
// app servers; stores that keep their own state, such as several
// memstores, are not one backend: pass one of them): single requests, as
// runExactness describes, and layered requests, as runLayersExactness
// describes, and layered requests that give back part of what they took,
// as runSettleExactness describes.
func RunConcurrent(t *testing.T, stores []core.Store, goroutinesPerStore int) {
	t.Helper()
	t.Run("single", func(t *testing.T) { runExactness(testingT{t}, stores, goroutinesPerStore) })
	t.Run("layers", func(t *testing.T) { runLayersExactness(t, stores, goroutinesPerStore) })
	t.Run("settle", func(t *testing.T) { runSettleExactness(t, stores, goroutinesPerStore) })
}

// runSuite is Run on any tester, so that the suite's own tests can run it
// against broken stores and see it fail.
func runSuite(t tester, newStore func(t tester) core.Store) {
	run := runID(t)
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.run(string(alg), func(t tester) {
			for _, c := range storecasetest.Of(alg) {
				t.run(c.Name, func(t tester) {
					playCase(t, &c, newStore(t), run)
				})
			}
			t.run("lockout-extremes", func(t tester) {
				testLockoutExtremes(t, newStore(t), run, alg)
			})
			t.run("clock-step-back", func(t tester) {
				testStepBack(t, newStore(t), run, alg)
			})
			if alg == core.FixedWindow {
				t.run("prompt-cancel", func(t tester) {
					testPromptCancel(t, newStore(t), run)
				})
			}
			if alg != core.SlidingWindowLog {
				t.run("extremes", func(t tester) {
					testExtremes(t, newStore(t), run, alg)
				})
			}
		})
	}
}

// tester is what the suite needs of a *testing.T. The suite's own tests
// implement it with a fake that records failures.
type tester interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	// run runs f as a subtest named name, as testing.T.Run does.
	run(name string, f func(t tester)) bool
}

// testingT is a *testing.T as a tester.
type testingT struct{ *testing.T }

func (t testingT) run(name string, f func(t tester)) bool {
	return t.T.Run(name, func(t *testing.T) { f(testingT{t}) })
}

// runID returns a random prefix that keeps the keys of one call of the
// suite apart from those of every other call on the same backend.
func runID(t tester) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("storetest: drawing a key prefix: %v", err)
	}
	return "st-" + hex.EncodeToString(b[:])
}

// policy returns the policy alg, limit per window, burst, named after its
// fields as a Limiter would name it.
func policy(alg core.Algorithm, limit int64, window time.Duration, burst int64) core.Policy {
	p := core.Policy{Algorithm: alg, Limit: limit, Window: window, Burst: burst}
	p.Name = limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)
	return p
}
