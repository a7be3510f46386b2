package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecall"
	"github.com/apigate/ratelimit/keyfuncs"
)

const canceledBody = `{"error":"request_canceled","message":"The client closed the request."}`

// hooked is a memory store that calls hook before each decision. It is
// CallDirect (called on the caller's goroutine) as memstore is.
type hooked struct {
	*memstore.Store
	hook func()
}

func (s hooked) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.hook()
	return s.Store.Take(ctx, now, reqs, out)
}

// blocking is a store that answers only once its context ends, as a
// go-redis call with a canceled context does; it is not CallDirect, so
// the Limiter bounds it with its timeout.
type blocking struct {
	quietless
	unblock chan struct{}
}

func (s blocking) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if len(reqs) != 1 {
		return time.Time{}, errors.New("fake store: no layers")
	}
	select {
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-s.unblock:
		out[0] = core.Decision{Allowed: true, Limit: 1}
		return time.Time{}, nil
	}
}
func (blocking) Reset(context.Context, string, core.Policy) error { return nil }

// TestCanceledNeverProceeds checks that a request whose context ends
// before its handler would run never proceeds, under every fail mode, and
// is answered 499 with the error reported as context.Canceled.
func TestCanceledNeverProceeds(t *testing.T) {
	leaky := core.Policy{Name: "p", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 3}
	modes := map[string]func(t *testing.T) []core.Option{
		"fail open":   func(*testing.T) []core.Option { return nil },
		"fail closed": func(*testing.T) []core.Option { return nil }, // the policy says so
		"fallback":    func(t *testing.T) []core.Option { return []core.Option{core.WithFallback(memStore(t))} },
	}
	tests := []struct {
		name string
		// setup returns the store and, after the request's context has been
		// made, arranges for cancel to be called at the point under test.
		setup  func(t *testing.T, cancel context.CancelFunc) core.Store
		policy core.Policy
		// early cancels the context before Handle is called.
		early bool
	}{
		{
			name:  "ended before the decision, slow store",
			setup: func(*testing.T, context.CancelFunc) core.Store { return blocking{} },
			early: true, policy: perMinute,
		},
		{
			name: "ends while the slow store decides",
			setup: func(_ *testing.T, cancel context.CancelFunc) core.Store {
				time.AfterFunc(time.Millisecond, cancel)
				return blocking{}
			},
			policy: perMinute,
		},
		{
			name:  "ended before the decision, memory store",
			setup: func(t *testing.T, _ context.CancelFunc) core.Store { return memStore(t) },
			early: true, policy: perMinute,
		},
		{
			name: "ends after the store admitted it",
			setup: func(t *testing.T, cancel context.CancelFunc) core.Store {
				return hooked{Store: memStore(t), hook: cancel}
			},
			policy: perMinute,
		},
		{
			name: "ends while paced",
			setup: func(t *testing.T, cancel context.CancelFunc) core.Store {
				s := memStore(t)
				// A first request fills the queue, so the one under test waits.
				_, _, err := storecall.Take(s, context.Background(), t0, core.Request{Key: "ip:192.0.2.1", Policy: leaky, Cost: 1})
				require.NoError(t, err)
				time.AfterFunc(time.Millisecond, cancel)
				return s
			},
			policy: leaky,
		},
	}
	for _, tc := range tests {
		for mode, lopts := range modes {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				store := tc.setup(t, cancel)
				if tc.early {
					cancel()
				}
				var errs []error
				p := tc.policy
				if mode == "fail closed" {
					p.FailClosed = time.Second
				}
				f, err := newFlow(t, store, layer(p), lopts(t),
					httplimit.WithMaxDelay(time.Hour),
					httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
				require.NoError(t, err)
				r, w := newRequest(), newResponse()
				r.ctx = ctx

				assert.False(t, handle(f, r, w), "a request whose client left proceeds")
				assert.Equal(t, 1, w.writes)
				assert.Equal(t, 499, w.status, "status: nginx's client closed request")
				assert.Equal(t, canceledBody, w.body)
				require.Len(t, errs, 1, "the disconnect alone is reported")
				assert.ErrorIs(t, errs[0], context.Canceled)
				assert.ErrorIs(t, errs[0], context.Canceled)
				assert.NotErrorIs(t, errs[0], limits.ErrStore, "a disconnect is not a store failure")
			})
		}
	}
}

// leftRequest returns a request whose context has ended: its client left.
func leftRequest() *request {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newRequest()
	r.ctx = ctx
	return r
}

// errKeyTimeout is the error of a key function that timed out on a lookup of
// its own: it wraps context.DeadlineExceeded, yet the client still waits.
var errKeyTimeout = fmt.Errorf("api key lookup: %w", context.DeadlineExceeded)

// TestCanceledLogsAtDebug checks that a client's disconnect, which any
// client can cause at will, is not logged above Debug, and that an error
// is a disconnect only when the request's own context ended: one that
// wraps context.DeadlineExceeded (a key function's timeout, a store's)
// while the client waits is no disconnect.
func TestCanceledLogsAtDebug(t *testing.T) {
	storeTimeout := errors.Join(limits.ErrStore, context.DeadlineExceeded)
	for _, tc := range []struct {
		name  string
		r     *request
		err   error
		level slog.Level
		msg   string
	}{
		{"client left", leftRequest(), errors.Join(context.Canceled, context.Canceled), slog.LevelDebug, "ratelimit: request canceled"},
		{"key function timed out", newRequest(), errKeyTimeout, slog.LevelWarn, "ratelimit: request not decided"},
		{"store timed out", newRequest(), storeTimeout, slog.LevelWarn, "ratelimit: store failed"},
		{"store timed out, then the client left", leftRequest(), storeTimeout, slog.LevelWarn, "ratelimit: store failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recordHandler
			httplimit.LogErrors(rec.logger())(tc.r, tc.err)
			require.Len(t, rec.records, 1)
			assert.Equal(t, tc.level, rec.records[0].Level)
			assert.Equal(t, tc.msg, rec.records[0].Message)
		})
	}
}

// TestDefaultResponderCanceled: 499 for a request whose context ended,
// and never for one whose client waits, whatever its error wraps.
func TestDefaultResponderCanceled(t *testing.T) {
	w := newResponse()
	httplimit.DefaultResponder(leftRequest(), w, core.Decision{}, errors.Join(context.Canceled, context.Canceled))
	assert.Equal(t, 499, w.status)
	assert.Equal(t, "application/json", w.contentType)
	assert.Equal(t, canceledBody, w.body)

	w = newResponse()
	httplimit.DefaultResponder(newRequest(), w, core.Decision{}, errKeyTimeout)
	assert.Equal(t, 500, w.status, "a key function's timeout, the client waiting")
}

// TestKeyTimeoutIsNoDisconnect runs the flow with a key function that
// times out on a lookup of its own, its client still there: 500 and a
// Warn line, never 499 nor "request canceled".
func TestKeyTimeoutIsNoDisconnect(t *testing.T) {
	var rec recordHandler
	ly := layer(perMinute)
	ly.Key = func(keyfuncs.Request) (string, error) { return "", errKeyTimeout }
	f, err := newFlow(t, memStore(t), ly, nil, httplimit.WithErrorHandler(httplimit.LogErrors(rec.logger())))
	require.NoError(t, err)
	w := newResponse()
	assert.False(t, handle(f, newRequest(), w))
	assert.Equal(t, 500, w.status)
	require.Len(t, rec.records, 1)
	assert.Equal(t, slog.LevelWarn, rec.records[0].Level)
	assert.Equal(t, "ratelimit: request not decided", rec.records[0].Message)
}
