package httplimit_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// switchStore is a memory store that fails while down is set.
type switchStore struct {
	*memstore.Store
	down *atomic.Bool
}

var errSwitchedOff = errors.New("switch store: down")

func (s switchStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errSwitchedOff
	}
	return s.Store.Take(ctx, now, reqs, out)
}

// TestOutageLoggedOnce runs a Flow through an outage of its store under
// each fail mode: its ErrorHandler hears every failure, LogErrors writes
// one Warn line naming the store's error and, once the store decides
// again, one Info line counting them all.
func TestOutageLoggedOnce(t *testing.T) {
	modes := map[string]func(t *testing.T) []core.Option{
		"fail open":   func(*testing.T) []core.Option { return nil },
		"fail closed": func(*testing.T) []core.Option { return nil }, // the policy says so
		"fallback":    func(t *testing.T) []core.Option { return []core.Option{core.WithFallback(memStore(t))} },
	}
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute}
	for mode, lopts := range modes {
		t.Run(mode, func(t *testing.T) {
			var down atomic.Bool
			var rec recordHandler
			var heard atomic.Int64
			log := httplimit.LogErrors(rec.logger())
			// No circuit breaker: every request asks the store, whose
			// clock (t0) never reaches a probe.
			p := p
			if mode == "fail closed" {
				p.FailClosed = time.Second
			}
			f, err := newFlow(t, switchStore{Store: memStore(t), down: &down}, layer(p),
				append(lopts(t), core.WithCircuitBreaker(0, time.Millisecond)),
				httplimit.WithErrorHandler(func(r keyfuncs.Request, err error) { heard.Add(1); log(r, err) }))
			require.NoError(t, err)
			handle := func() { handle(f, newRequest(), newResponse()) }

			handle()
			require.Empty(t, rec.records, "healthy")
			down.Store(true)
			for range 50 {
				handle()
			}
			assert.Equal(t, int64(50), heard.Load(), "the ErrorHandler hears every failure")
			require.Equal(t, 1, len(rec.records), "the first failure alone is logged within 10 s")
			w := rec.records[0]
			assert.Equal(t, slog.LevelWarn, w.Level)
			assert.Equal(t, "ratelimit: store failed", w.Message)
			assert.Contains(t, attr(w, "error"), errSwitchedOff.Error(), "the store's error")
			assert.Equal(t, "error", attr(w, "error_kind"))

			down.Store(false)
			for range 3 {
				handle()
			}
			require.Equal(t, 2, len(rec.records), "the store decides again: one line")
			e := rec.records[1]
			assert.Equal(t, slog.LevelInfo, e.Level)
			assert.Equal(t, "ratelimit: store decides again", e.Message)
			assert.Equal(t, "50", attr(e, "failures"))
		})
	}
}

// attr returns the value of r's attribute key, as a string.
func attr(r slog.Record, key string) string {
	var v string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}
