package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
)

// The race of runExactness: exactLimit per hour, exactAttempts tries.
const (
	exactLimit    = 300
	exactAttempts = 1500
)

// runExactness hammers one key per algorithm from goroutinesPerStore
// goroutines on each of stores (several stores sharing one backend, such as
// one Redis reached by several clients, model several app servers) and
// checks that exactly the policy's limit is admitted; then again under a
// policy with a Lockout, whose denials must all be the one lockout's
// (a store that strikes twice in a race would lock out for longer).
//
// The policy is 300 per hour (a bucket of 300 for the buckets), the key is
// fresh, and all 1,500 attempts, split evenly over the goroutines, are made
// at one fixed time, so no window boundary or refill interferes: exactly 300
// must pass, each seeing a different Remaining (a store that loses an update
// shows a Remaining twice). The leaky bucket may admit 301. Stores that
// keep their own state, such as several memstores, are not one backend:
// pass one of them.
func runExactness(t tester, stores []core.Store, goroutinesPerStore int) {
	if len(stores) == 0 || goroutinesPerStore < 1 {
		t.Fatalf("storetest.RunConcurrent: %d stores and %d goroutines per store: want at least one of each", len(stores), goroutinesPerStore)
	}
	run := runID(t)
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.run(string(alg), func(t tester) {
			exactRace(t, stores, goroutinesPerStore, run, alg, nil)
		})
		t.run(string(alg)+"-lockout", func(t tester) {
			exactRace(t, stores, goroutinesPerStore, run, alg, &lockoutOf{exactLockout, 4 * exactLockout, 0})
		})
	}
}

// exactLockout is the lockout of runExactness's second race: longer than
// any algorithm's own wait there, so that a second strike (4h) would show.
const exactLockout = 2 * time.Hour

// exactRace is one race of runExactness on a fresh key of alg. With a lockout,
// every denial must also be the lockout's, with RetryAfter the first
// lockout exactly: all attempts are made at one time, so the lockout
// starts once, at one strike, whoever races it.
func exactRace(t tester, stores []core.Store, goroutinesPerStore int, run string, alg core.Algorithm, lockout *lockoutOf) {
	now := epoch().Add(30 * time.Minute)
	var burst int64
	if limits.IsBucket(alg) {
		burst = exactLimit
	}
	req := core.Request{
		Key:    run + "-exact-" + string(alg),
		Policy: policy(alg, exactLimit, time.Hour, burst),
		Cost:   1,
	}
	if lockout != nil {
		req.Key += "-lockout"
		lockout.set(&req.Policy)
	}
	var badDenials atomic.Int64
	n := len(stores) * goroutinesPerStore
	var (
		admitted, errs atomic.Int64
		seen           [exactLimit]atomic.Int32 // admissions per Remaining
		start          = make(chan struct{})
		wg             sync.WaitGroup
	)
	for g := range n {
		store := stores[g/goroutinesPerStore]
		attempts := exactAttempts / n
		if g < exactAttempts%n {
			attempts++
		}
		wg.Go(func() {
			<-start
			for range attempts {
				d, _, err := storecall.Take(store, context.Background(), now, req)
				if err != nil {
					if errs.Add(1) == 1 {
						t.Errorf("goroutine %d on store %d: %v", g, g/goroutinesPerStore, err)
					}
					continue
				}
				if !d.Allowed {
					if lockout != nil && (!d.LockedOut || d.RetryAfter != exactLockout) && badDenials.Add(1) == 1 {
						t.Errorf("goroutine %d on store %d: a denial under a lockout of %v: %s, want locked out for %v", g, g/goroutinesPerStore, exactLockout, show(d), exactLockout)
					}
					continue
				}
				admitted.Add(1)
				if d.Remaining >= 0 && d.Remaining < exactLimit {
					seen[d.Remaining].Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()

	got := admitted.Load()
	race := fmt.Sprintf("%d attempts from %d goroutines over %d store(s), %d errors", exactAttempts, n, len(stores), errs.Load())
	if bad := badDenials.Load(); bad > 0 {
		t.Errorf("%s: %d denials not locked out for %v", race, bad, exactLockout)
	}
	if alg == core.LeakyBucket {
		if got < exactLimit || got > exactLimit+1 {
			t.Errorf("%s: admitted %d, want %d or %d", race, got, exactLimit, exactLimit+1)
		}
		return
	}
	if got != exactLimit {
		t.Errorf("%s: admitted %d, want exactly %d", race, got, exactLimit)
	}
	var twice, never []int
	for r := range seen {
		switch seen[r].Load() {
		case 0:
			never = append(never, r)
		case 1:
		default:
			twice = append(twice, r)
		}
	}
	if len(twice) > 0 || len(never) > 0 {
		t.Errorf("%s: admitted requests saw %d Remaining values more than once %v and %d never %v; want each of 0..%d once", race, len(twice), head(twice), len(never), head(never), exactLimit-1)
	}
}

// head returns the first few of xs, enough for a failure message.
func head(xs []int) []int {
	return xs[:min(len(xs), 8)]
}
