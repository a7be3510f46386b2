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
	requests, denied, failed, lease    atomic.Int64
	takes, refunds                     atomic.Int64
	globalTakes, globalRefunds, gUnits atomic.Int64
	renewals                           atomic.Int64

	mu                  sync.Mutex
	admitted, straddled map[int64]int64 // by window
}

func newTally() *tally {
	return &tally{admitted: map[int64]int64{}, straddled: map[int64]int64{}}
}

// arrivedKey is the context key of the time a request arrived.
type arrivedKey struct{}

// count counts the requests next serves, and those it answers 429 and
// 503.
func (t *tally) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.requests.Add(1)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r = r.WithContext(context.WithValue(r.Context(), arrivedKey{}, time.Now()))
		next.ServeHTTP(sw, r)
		switch sw.code {
		case http.StatusTooManyRequests:
			t.denied.Add(1)
		case http.StatusServiceUnavailable:
			t.failed.Add(1)
		}
	})
}

// serveAPI is the API: it counts the admission in the window it was
// decided in, between the request's arrival and now.
func (t *tally) serveAPI(w http.ResponseWriter, r *http.Request) {
	win := leasefleet.WindowOf(time.Now())
	arrived, _ := r.Context().Value(arrivedKey{}).(time.Time)
	from := leasefleet.WindowOf(arrived)
	t.mu.Lock()
	if from == win {
		t.admitted[win]++
	} else {
		t.straddled[from]++
	}
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
	admitted, straddled := maps.Clone(t.admitted), maps.Clone(t.straddled)
	t.mu.Unlock()
	return leasefleet.Counts{
		Requests: t.requests.Load(), Admitted: admitted, Straddled: straddled, Denied: t.denied.Load(), Failed: t.failed.Load(),
		LeaseDecisions: t.lease.Load(),
		GlobalTakes:    t.globalTakes.Load(), GlobalRefunds: t.globalRefunds.Load(), GlobalTakeUnits: t.gUnits.Load(),
		GlobalRenewals: t.renewals.Load(),
		Takes:          t.takes.Load(), Refunds: t.refunds.Load(),
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
		if len(reqs) == 1 {
			s.t.renewals.Add(1)
		}
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
