package storetest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// recorder is a tester that records failures instead of reporting them,
// so that a test can run the suite and look at what it found. Like a
// *testing.T, it runs each subtest on a goroutine of its own, and Fatalf
// ends that goroutine.
type recorder struct {
	name string
	log  *failures
}

// failures are the failures of one run of the suite, by test name.
type failures struct {
	mu   sync.Mutex
	list []string
}

func newRecorder() *recorder { return &recorder{name: "suite", log: &failures{}} }

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.list = append(r.log.list, r.name+": "+fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) run(name string, f func(t tester)) bool {
	sub := &recorder{name: r.name + "/" + name, log: r.log}
	before := len(r.all())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(sub)
	}()
	<-done
	return len(r.all()) == before
}

// all returns a copy of the failures so far.
func (r *recorder) all() []string {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return append([]string(nil), r.log.list...)
}

// under returns the failures of tests whose name contains part.
func (r *recorder) under(part string) []string {
	var out []string
	for _, f := range r.all() {
		if name, _, _ := strings.Cut(f, ": "); strings.Contains(name, part) {
			out = append(out, f)
		}
	}
	return out
}

// broken wraps a correct store and breaks its decisions with breakTake.
type broken struct {
	core.Store
	breakTake func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error)
}

// Take breaks the decision of a request alone; several pass through.
func (b *broken) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if len(reqs) != 1 || len(out) != 1 {
		return b.Store.Take(ctx, now, reqs, out)
	}
	d, err := b.breakTake(reqs[0], func(req core.Request) (core.Decision, error) {
		d, _, err := storecall.Take(b.Store, ctx, now, req)
		return d, err
	})
	out[0] = d
	return time.Time{}, err
}

// brokenStores returns stores that each break one rule of the suite.
func brokenStores() map[string]func(inner core.Store) core.Store {
	return map[string]func(inner core.Store) core.Store{
		// The first request a key's policy denies passes all the same.
		"admits-one-too-many": func(inner core.Store) core.Store {
			var mu sync.Mutex
			extra := map[string]bool{}
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				d, err := take(req)
				if err != nil || d.Allowed {
					return d, err
				}
				mu.Lock()
				defer mu.Unlock()
				if id := req.Key + "\x00" + req.Policy.Name; !extra[id] {
					extra[id] = true
					d.Allowed, d.RetryAfter = true, 0
				}
				return d, nil
			}}
		},
		"retry-after-1ms-short": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				d, err := take(req)
				if err == nil && !d.Allowed {
					d.RetryAfter -= time.Millisecond
				}
				return d, err
			}}
		},
		"remaining-off-by-one": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				d, err := take(req)
				d.Remaining++
				return d, err
			}}
		},
		// A store that knows nothing of lockouts.
		"ignores-lockout": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				req.Policy.Lockout, req.Policy.LockoutMax, req.Policy.LockoutMemory = 0, 0, 0
				return take(req)
			}}
		},
		// A lockout that never escalates: every strike is the first.
		"lockout-never-escalates": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				req.Policy.LockoutMax = 0
				return take(req)
			}}
		},
		"ignores-cost": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				req.Cost = 1
				return take(req)
			}}
		},
	}
}

// newMemstore returns a fresh memstore, closed when t ends.
func newMemstore(t *testing.T) *memstore.Store {
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// TestSuiteCatchesBrokenStores runs the suite, with a recording tester,
// against stores that each break one rule, and requires it to fail for
// each, under every algorithm; and to pass a correct store seen through
// the same wrapper and recorder, so that the failures are the stores'.
func TestSuiteCatchesBrokenStores(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		store := &broken{Store: newMemstore(t), breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
			return take(req)
		}}
		rec := newRecorder()
		runSuite(rec, func(tester) core.Store { return store })
		runExactness(rec, []core.Store{store}, 8)
		require.Empty(t, rec.all(), "the suite fails a correct store")
	})
	for name, breaker := range brokenStores() {
		t.Run(name, func(t *testing.T) {
			store := breaker(newMemstore(t))
			rec := newRecorder()
			runSuite(rec, func(tester) core.Store { return store })
			require.NotEmpty(t, rec.all(), "the suite passes a store that %s", name)
			for _, alg := range limits.Algorithms[core.Algorithm]() {
				assert.NotEmpty(t, rec.under("suite/"+string(alg)+"/"), "the suite passes %s under a store that %s", alg, name)
			}
			t.Logf("%d failures, the first: %s", len(rec.all()), rec.all()[0])
		})
	}
	// The race of RunConcurrent catches the extra admission on its own.
	t.Run("admits-one-too-many/exactness", func(t *testing.T) {
		rec := newRecorder()
		runExactness(rec, []core.Store{brokenStores()["admits-one-too-many"](newMemstore(t))}, 8)
		for _, alg := range limits.Algorithms[core.Algorithm]() {
			if alg != core.LeakyBucket { // which may admit one more
				assert.NotEmpty(t, rec.under("suite/"+string(alg)), "RunConcurrent passes %s", alg)
			}
		}
	})
	// The extreme cases alone catch a RetryAfter 1ms short.
	t.Run("retry-after-1ms-short/extremes", func(t *testing.T) {
		rec := newRecorder()
		store := brokenStores()["retry-after-1ms-short"](newMemstore(t))
		runSuite(rec, func(tester) core.Store { return store })
		for _, alg := range limits.Algorithms[core.Algorithm]() {
			if alg != core.SlidingWindowLog {
				assert.NotEmpty(t, rec.under("suite/"+string(alg)+"/extremes/"), "the extreme cases pass %s", alg)
			}
		}
	})
}
