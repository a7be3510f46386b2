package httplimit_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/keyfuncs"
)

const internalBody = `{"error":"rate_limit_error","message":"Internal server error."}`

// recordHandler is a slog.Handler keeping every record.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }
func (h *recordHandler) logger() *slog.Logger               { return slog.New(h) }

// panicking is a CallDirect store whose every decision panics.
type panicking struct{ hooked }

func (panicking) Take(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	panic("store broke")
}

// TestPanicsAreRecovered checks that a panic anywhere in the flow is
// recovered, reported as a *PanicError naming where it happened, and
// answered once: 500 by the Responder unless a response was already
// written.
func TestPanicsAreRecovered(t *testing.T) {
	boom := func() { panic("boom: secret-request-data") }
	denyAll := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: 60e9}
	tests := []struct {
		name   string
		in     string
		opts   []httplimit.Option
		lopts  []core.Option
		closed time.Duration // the policy's FailClosed
		key    keyfuncs.Func
		cost   func(keyfuncs.Request) int64
		store  func(t *testing.T) core.Store
		before int // requests sent first, to use up the quota
		status int
		body   string
	}{
		{name: "skip", in: "skip function",
			opts: []httplimit.Option{httplimit.WithSkip(func(keyfuncs.Request) bool { boom(); return false })}},
		{name: "key", in: "key function",
			key: func(keyfuncs.Request) (string, error) { boom(); return "", nil }},
		{name: "key, nil pointer", in: "key function",
			key: func(r keyfuncs.Request) (string, error) {
				var m map[string]*string
				return *m[r.Header("X")], nil
			}},
		{name: "key, panic(nil)", in: "key function",
			key: func(keyfuncs.Request) (string, error) { panic(nil) }},
		{name: "cost", in: "cost function",
			cost: func(keyfuncs.Request) int64 { boom(); return 1 }},
		{name: "store", in: "limiter",
			store: func(t *testing.T) core.Store { return panicking{} }},
		{name: "responder before writing", in: "responder", before: 1,
			opts: []httplimit.Option{httplimit.WithResponder(func(keyfuncs.Request, httplimit.Response, core.Decision, error) { boom() })}},
		{name: "responder after writing", in: "responder", before: 1, status: 429, body: "over",
			opts: []httplimit.Option{httplimit.WithResponder(func(_ keyfuncs.Request, w httplimit.Response, _ core.Decision, _ error) {
				_ = w.Write(429, "text/plain", []byte("over"))
				boom()
			})}},
		{name: "responder writing twice", in: "responder", before: 1, status: 429, body: "once",
			opts: []httplimit.Option{httplimit.WithResponder(func(_ keyfuncs.Request, w httplimit.Response, _ core.Decision, _ error) {
				_ = w.Write(429, "text/plain", []byte("once"))
				if err := w.Write(200, "text/plain", []byte("twice")); err != nil {
					panic(err)
				}
			})}},
		{name: "responder, fail closed", in: "responder",
			store: func(*testing.T) core.Store { return failing{} }, closed: time.Second,
			opts: []httplimit.Option{httplimit.WithResponder(func(keyfuncs.Request, httplimit.Response, core.Decision, error) { boom() })}},
		{name: "error handler on a store failure", in: "error handler",
			store: func(*testing.T) core.Store { return failing{} },
			opts:  []httplimit.Option{httplimit.WithErrorHandler(func(keyfuncs.Request, error) { boom() })}},
		{name: "responder, no key", in: "responder",
			key: mustKeyFunc(t)(keyfuncs.APIKeyHeader("X-Api-Key", nil)),
			opts: []httplimit.Option{
				httplimit.WithResponder(func(keyfuncs.Request, httplimit.Response, core.Decision, error) { boom() }),
			}},
		{name: "headers", in: "headers",
			opts: []httplimit.Option{httplimit.WithHeaders(headers.Config{XRateLimit: true})}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var store core.Store = memStore(t)
			if tc.store != nil {
				store = tc.store(t)
			}
			var errs []error
			var rec recordHandler
			opts := append([]httplimit.Option{
				httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }),
			}, tc.opts...)
			if tc.in == "error handler" {
				// The ErrorHandler broke: the panic goes to the default logger.
				prev := slog.Default()
				slog.SetDefault(rec.logger())
				t.Cleanup(func() { slog.SetDefault(prev) })
			}
			f, err := newFlow(t, store, httplimit.Layer{Policy: limitertest.Named(denyAll, denyAll.Name, tc.closed), Key: tc.key, Cost: tc.cost}, tc.lopts, opts...)
			require.NoError(t, err)
			for range tc.before {
				require.True(t, handle(f, newRequest(), newResponse()))
			}
			r := newRequest()
			var w httplimit.Response = newResponse()
			if tc.in == "headers" {
				w = panickingSetter{w.(*response)}
			}
			var proceed bool
			require.NotPanics(t, func() { proceed = handle(f, r, w) })
			assert.False(t, proceed)

			res := unwrap(w)
			status, body := tc.status, tc.body
			if status == 0 {
				status, body = 500, internalBody
			}
			assert.Equal(t, 1, res.writes, "writes")
			assert.Equal(t, status, res.status)
			assert.Equal(t, body, res.body)

			if tc.in == "error handler" {
				require.Len(t, rec.records, 1)
				assert.Equal(t, slog.LevelError, rec.records[0].Level)
				assert.Equal(t, "ratelimit: panic", rec.records[0].Message)
				return
			}
			require.NotEmpty(t, errs)
			err = errs[len(errs)-1]
			var pe *httplimit.PanicError
			require.ErrorAs(t, err, &pe, "%T is not a *PanicError", err)
			assert.Equal(t, tc.in, panicIn(pe))
			assert.NotNil(t, pe.Value)
			assert.Contains(t, string(pe.Stack), "panic")
			assert.True(t, strings.HasPrefix(err.Error(), "httplimit: panic in "+tc.in+": "), err.Error())
			assert.NotContains(t, res.body, "secret")
		})
	}
}

// TestPanicHandlerAndResponderBothBreak checks the last resort: the
// ErrorHandler and the Responder both panic; the default logger hears
// the panic and DefaultResponder answers.
func TestPanicHandlerAndResponderBothBreak(t *testing.T) {
	var rec recordHandler
	prev := slog.Default()
	slog.SetDefault(rec.logger())
	t.Cleanup(func() { slog.SetDefault(prev) })
	f, err := newFlow(t, memStore(t), httplimit.Layer{Policy: perMinute, Key: func(keyfuncs.Request) (string, error) { panic("key") }}, nil,
		httplimit.WithErrorHandler(func(keyfuncs.Request, error) { panic("handler") }),
		httplimit.WithResponder(func(keyfuncs.Request, httplimit.Response, core.Decision, error) { panic("responder") }))
	require.NoError(t, err)
	w := newResponse()
	require.NotPanics(t, func() { assert.False(t, handle(f, newRequest(), w)) })
	assert.Equal(t, 1, w.writes)
	assert.Equal(t, http.StatusInternalServerError, w.status)
	assert.Equal(t, internalBody, w.body)
	require.Len(t, rec.records, 1)
	assert.Equal(t, slog.LevelError, rec.records[0].Level)
}

// TestPanicLoggedAtErrorWithStack checks LogErrors on a recovered panic.
func TestPanicLoggedAtErrorWithStack(t *testing.T) {
	var rec recordHandler
	f, err := newFlow(t, memStore(t), httplimit.Layer{Policy: perMinute, Key: func(keyfuncs.Request) (string, error) { panic("key") }}, nil,
		httplimit.WithErrorHandler(httplimit.LogErrors(rec.logger())))
	require.NoError(t, err)
	handle(f, newRequest(), newResponse())
	require.Len(t, rec.records, 1)
	r := rec.records[0]
	assert.Equal(t, slog.LevelError, r.Level)
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	assert.Equal(t, "httplimit: panic in key function: key", attrs["error"])
	assert.Contains(t, attrs["stack"], "goroutine")
}

// TestNextHandlerPanicsAreNotRecovered: the flow recovers only its own
// panics; once Handle has returned, the framework owns the request.
func TestNextHandlerPanicsAreNotRecovered(t *testing.T) {
	f, err := newFlow(t, memStore(t), layer(perMinute), nil)
	require.NoError(t, err)
	assert.PanicsWithValue(t, "next", func() {
		if handle(f, newRequest(), newResponse()) {
			panic("next")
		}
	})
}

// panickingSetter is a response whose header map panics, as a broken
// adapter's might.
type panickingSetter struct{ *response }

func (panickingSetter) Set(string, string) { panic("set") }

func unwrap(w httplimit.Response) *response {
	if p, ok := w.(panickingSetter); ok {
		return p.response
	}
	return w.(*response)
}

// TestPanicErrorUnwrapsItsValue: a panic with an error is that error
// too, for errors.Is, and still a *PanicError, answered 500.
func TestPanicErrorUnwrapsItsValue(t *testing.T) {
	errBoom := errors.New("boom")
	var errs []error
	f, err := newFlow(t, memStore(t), httplimit.Layer{Policy: perMinute, Key: func(keyfuncs.Request) (string, error) { panic(errBoom) }}, nil,
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
	require.NoError(t, err)
	w := newResponse()
	require.False(t, handle(f, newRequest(), w))
	assert.Equal(t, 500, w.status)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], errBoom)
	var pe *httplimit.PanicError
	require.ErrorAs(t, errs[0], &pe)
	assert.Equal(t, "key function", panicIn(pe))
	assert.Nil(t, (&httplimit.PanicError{Value: "not an error"}).Unwrap())
}

// panicIn returns where the panic of pe happened, as its message names it.
func panicIn(pe *httplimit.PanicError) string {
	where, _, _ := strings.Cut(strings.TrimPrefix(pe.Error(), "httplimit: panic in "), ": ")
	return where
}
