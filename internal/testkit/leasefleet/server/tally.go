package main

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/testkit/leasefleet"
)

// tally counts what the server did (leasefleet.Counts); safe for
// concurrent use.
type tally struct {
	requests, denied, lease            atomic.Int64
	takes, refunds                     atomic.Int64
	globalTakes, globalRefunds, gUnits atomic.Int64

	mu       sync.Mutex
	admitted map[int64]int64 // by window
}

func newTally() *tally { return &tally{admitted: map[int64]int64{}} }

// count counts the requests next serves, and those it answers 429.
func (t *tally) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.requests.Add(1)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		if sw.code == http.StatusTooManyRequests {
			t.denied.Add(1)
		}
	})
}

// serveAPI is the API: it counts the admission in the window it runs in,
// right after the decision.
func (t *tally) serveAPI(w http.ResponseWriter, _ *http.Request) {
	win := leasefleet.WindowOf(time.Now())
	t.mu.Lock()
	t.admitted[win]++
	t.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// serveCounts serves the counts as JSON.
func (t *tally) serveCounts(w http.ResponseWriter, _ *http.Request) {
	b, err := json.Marshal(t.counts())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (t *tally) counts() leasefleet.Counts {
	t.mu.Lock()
	admitted := maps.Clone(t.admitted)
	t.mu.Unlock()
	return leasefleet.Counts{
		Requests: t.requests.Load(), Admitted: admitted, Denied: t.denied.Load(),
		LeaseDecisions: t.lease.Load(),
		GlobalTakes:    t.globalTakes.Load(), GlobalRefunds: t.globalRefunds.Load(), GlobalTakeUnits: t.gUnits.Load(),
		Takes: t.takes.Load(), Refunds: t.refunds.Load(),
	}
}

// Bind makes the tally a core.Observer: it counts the global layer's
// decisions made in process.
func (t *tally) Bind(*core.Limiter) (func(core.Event), error) {
	return func(e core.Event) {
		if e.Source == core.SourceLease && e.Policy.Name == leasefleet.GlobalName {
			t.lease.Add(1)
		}
	}, nil
}

// statusWriter remembers the status written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// countingStore is the Redis store, counting its round trips in t: every
// Take and Refund, and apart those whose requests include the global
// layer's key (the lease's renewals and give-backs, and the requests no
// lease decided).
type countingStore struct {
	core.Store
	redis *redisstore.Store
	t     *tally
}

var _ core.Partitioned = (*countingStore)(nil)

func (s *countingStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.t.takes.Add(1)
	if j := globalIn(reqs); j >= 0 {
		s.t.globalTakes.Add(1)
		s.t.gUnits.Add(reqs[j].Cost)
	}
	return s.Store.Take(ctx, now, reqs, out)
}

func (s *countingStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	s.t.refunds.Add(1)
	if globalIn(reqs) >= 0 {
		s.t.globalRefunds.Add(1)
	}
	return s.Store.Refund(ctx, at, reqs)
}

// Partitioner is the Redis store's: a breaker per Cluster master.
func (s *countingStore) Partitioner() func(key string) string { return s.redis.Partitioner() }

// globalIn returns the index of the global layer's request in reqs, or -1.
func globalIn(reqs []core.Request) int {
	for j := range reqs {
		if reqs[j].Policy.Name == leasefleet.GlobalName {
			return j
		}
	}
	return -1
}
