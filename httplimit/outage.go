package httplimit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/keyfuncs"
)

// outageEvery is the least time between two Warn lines of one outage
// account (see LogErrors): the first failure is logged at once, then at
// most one line each outageEvery, with the count of the failures left
// unlogged since the line before. An outage writes at most 7 Warn lines
// in any minute, 6 a minute once it lasts, and one Info line at its end.
const outageEvery = 10 * time.Second

// storeOutage is a Flow's account of its store's failures, for the
// ErrorHandler LogErrors builds: it bounds their Warn lines and logs the
// end of an outage once, at Info, when the store decides again. The
// Flow's hot path reads only down. Time is data: each method takes now,
// read against epoch on the monotonic clock.
type storeOutage struct {
	down       atomic.Bool  // a failure was heard, and the store has not decided since
	next       atomic.Int64 // when the next Warn line may be written, in ns since epoch
	suppressed atomic.Int64 // failures heard but not logged since the last Warn line
	count      atomic.Int64 // failures heard in this outage
	epoch      time.Time

	mu        sync.Mutex
	since     time.Time    // the outage's first failure heard
	announced *slog.Logger // where a Warn line of this outage went, and so goes its end; nil: none did
}

// newStoreOutage returns an account with no outage, whose first failure
// is logged at once.
func newStoreOutage(epoch time.Time) *storeOutage {
	o := &storeOutage{epoch: epoch}
	o.next.Store(math.MinInt64)
	return o
}

// storeFailure is a store failure as a Flow hands it to its ErrorHandler:
// the error itself (Error and Unwrap are its own), with the Flow's outage
// account, in which the ErrorHandler LogErrors builds counts it.
type storeFailure struct {
	err    error
	outage *storeOutage
}

func (e *storeFailure) Error() string { return e.err.Error() }
func (e *storeFailure) Unwrap() error { return e.err }

// mark returns err, carrying o when it reports a store failure.
func (o *storeOutage) mark(err error) error {
	if outcome.StoreErrorKind(err) == "" {
		return err
	}
	return &storeFailure{err: err, outage: o}
}

// failed hears the store failure err, of kind kind, of request r at now,
// and logs it at Warn through l when it is the first of an outage or
// outageEvery has passed since the last line; it counts it otherwise.
func (o *storeOutage) failed(l *slog.Logger, r keyfuncs.Request, err error, kind string, now time.Time) {
	ns := int64(now.Sub(o.epoch))
	if o.down.Load() && ns < o.next.Load() { // the outage's common case: counted, lock-free
		o.count.Add(1)
		o.suppressed.Add(1)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		o.since, o.announced = now, nil
		o.count.Store(0) // before down: the lock-free path counts only once down is set
		o.down.Store(true)
	}
	n := o.count.Add(1)
	if ns < o.next.Load() {
		o.suppressed.Add(1)
		return
	}
	o.next.Store(ns + int64(outageEvery))
	o.announced = l
	attrs := []slog.Attr{
		slog.String("error", err.Error()),
		slog.String("error_kind", kind),
		slog.String("method", r.Method()),
		slog.String("route", r.Route()),
	}
	if s := o.suppressed.Swap(0); s > 0 {
		attrs = append(attrs, slog.Int64("suppressed", s))
	}
	if n > 1 {
		attrs = append(attrs, slog.Duration("down_for", now.Sub(o.since)))
	}
	l.LogAttrs(r.Context(), slog.LevelWarn, "ratelimit: store failed", attrs...)
}

// recovered hears that the store decided again at now. The end of an
// outage that was logged is logged once, at Info, where its failure was;
// the failures it counted are in that line, and no later one.
func (o *storeOutage) recovered(ctx context.Context, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	l := o.announced
	if l == nil {
		return // never logged: its failures go in the next Warn line
	}
	o.announced = nil
	o.suppressed.Store(0)
	l.LogAttrs(ctx, slog.LevelInfo, "ratelimit: store decides again",
		slog.Int64("failures", o.count.Load()),
		slog.Duration("down_for", now.Sub(o.since)))
}
