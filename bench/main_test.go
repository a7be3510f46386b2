package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/bench/internal/redisserver"
)

// The policies every library is given, so that each case asks the same of
// all of them.
const (
	// redisNeverLimit per redisWindow is never reached in a Redis case:
	// every invocation of a benchmark uses keys of its own, and no run
	// decides a million times on one key within a minute (run checks that
	// every decision was allowed).
	redisNeverLimit = 1_000_000
	// memNeverLimit per memWindow is never reached in a memory or
	// middleware case, where one key sees tens of millions of decisions a
	// minute.
	memNeverLimit = 1_000_000_000
	// floodLimit per floodWindow is the denied flood: the key is exhausted
	// before the clock starts, and every timed decision must be a denial.
	floodLimit = 10
	window     = time.Minute
)

// shared is the package's one Redis server, started by the first
// benchmark or test that needs it and stopped by TestMain: every library is
// measured against the same server with the same client options.
var shared struct {
	once sync.Once
	srv  *redisserver.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stopping redis-server:", err)
		}
	}
	os.Exit(code)
}

// redisServer returns the shared server. Without redis-server (and
// REDIS_URL) it skips, unless CI=true, where it fails: CI must not pass by
// skipping.
func redisServer(tb testing.TB) *redisserver.Server {
	tb.Helper()
	shared.once.Do(func() {
		shared.srv, shared.err = redisserver.Start(context.Background())
	})
	if errors.Is(shared.err, redisserver.ErrNotInstalled) && os.Getenv("CI") != "true" {
		tb.Skip(shared.err)
	}
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.srv
}

// runSeq numbers the invocations of benchmark functions, so that each
// invocation's keys are its own (see tag).
var runSeq atomic.Int64

// tag returns a prefix no other invocation uses, for the keys of one.
func tag() string { return "b" + strconv.FormatInt(runSeq.Add(1), 10) + "-" }

// decideFunc makes decision i of a run and says whether it was allowed.
type decideFunc func(i int) (allowed bool, err error)

// probe measures something around the timed part of a run: start is
// called just before the clock starts, stop just after it stops, with the
// number of decisions made.
type probe interface {
	start(tb testing.TB)
	stop(b *testing.B, decisions int)
}

// run times b.N decisions made from goroutines goroutines (the
// benchmark's own when 1), handed out in batches of batch indexes. It
// reports decisions/s, the process's CPU time per decision (user + system,
// all threads: cpu-ns/decision) and the share of decisions that returned an
// error (err%), and fails the benchmark if a decision that returned no
// error was not want: a case whose limit was reached, or whose flood was
// let through, measured something else.
func run(b *testing.B, goroutines, batch int, want bool, decide decideFunc, probes ...probe) {
	b.Helper()
	var errs, wrong atomic.Int64
	var firstErr atomic.Value
	one := func(i int) {
		allowed, err := decide(i)
		switch {
		case err != nil:
			if errs.Add(1) == 1 {
				firstErr.Store(err)
			}
		case allowed != want:
			wrong.Add(1)
		}
	}
	for _, p := range probes {
		p.start(b)
	}
	b.ReportAllocs()
	cpu0, cpuOK := processCPU()
	b.ResetTimer()
	if goroutines <= 1 {
		for i := range b.N {
			one(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		n := int64(b.N)
		for range goroutines {
			wg.Go(func() {
				for {
					end := next.Add(int64(batch))
					startAt := end - int64(batch)
					if startAt >= n {
						return
					}
					for i := startAt; i < min(end, n); i++ {
						one(int(i))
					}
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	cpu1, _ := processCPU()
	for _, p := range probes {
		p.stop(b, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/decision")
	}
	b.ReportMetric(100*float64(errs.Load())/float64(b.N), "err%")
	if e, ok := firstErr.Load().(error); ok {
		b.Logf("%d of %d decisions failed; the first: %v", errs.Load(), b.N, e)
	}
	if w := wrong.Load(); w > 0 {
		b.Fatalf("%d of %d decisions were not allowed=%v: the case measured something else", w, b.N, want)
	}
}
