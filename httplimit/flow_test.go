package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// request is a keyfuncs.Request for tests.
type request struct {
	remote string
	header http.Header
	ctx    context.Context
}

func (r *request) RemoteAddr() string                { return r.remote }
func (r *request) Header(name string) string         { return r.header.Get(name) }
func (r *request) HeaderValues(name string) []string { return r.header.Values(name) }
func (r *request) Method() string                    { return "GET" }
func (r *request) Route() string                     { return "/" }
func (r *request) Path() string                      { return "" } // unknown: layers match Route
func (r *request) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// Unrouted reports false: the tests' requests have a route.
func (r *request) Unrouted() bool { return false }

// handle runs f for r with a handler that does nothing, as an adapter
// does, and reports whether r proceeded.
func handle(f *httplimit.Flow, r keyfuncs.Request, w httplimit.Response) bool {
	return f.Serve(r, w, func(context.Context) int { return 0 })
}

func newRequest() *request { return &request{remote: "192.0.2.1:1234", header: http.Header{}} }

// response is a httplimit.Response for tests.
type response struct {
	header      http.Header
	status      int
	contentType string
	body        string
	writes      int
}

func newResponse() *response { return &response{header: http.Header{}} }

func (w *response) Set(k, v string) { w.header.Set(k, v) }
func (w *response) Write(status int, contentType string, body []byte) error {
	w.writes++
	w.status, w.contentType, w.body = status, contentType, string(body)
	return nil
}

// newFlow returns the Flow of one layer, ly, over store, deciding at t0,
// with opts, and with lopts passed to the Limiter after a generous
// timeout: no test here is about the timeout, and a store that is not
// CallDirect must not time out on a busy machine.
func newFlow(t testing.TB, store core.Store, ly httplimit.Layer, lopts []core.Option, opts ...httplimit.Option) (*httplimit.Flow, error) {
	t.Helper()
	return httplimit.New(clockstore.At(store, t0), []httplimit.Layer{ly}, append([]httplimit.Option{
		httplimit.WithCore(lopts...)}, opts...)...)
}

// layer is the Layer of p.
func layer(p core.Policy) httplimit.Layer { return httplimit.Layer{Policy: p} }

func memStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var perMinute = core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}

func TestNewRejects(t *testing.T) {
	var store core.Store = memStore(t)
	ok := httplimit.WithMaxDelay(time.Second)
	tests := []struct {
		name  string
		store core.Store
		opts  []httplimit.Option
		want  string // the error's detail
	}{
		{"nil store", nil, nil, "httplimit.New: nil store"},
		{"nil option", store, []httplimit.Option{ok, nil}, "httplimit.New: option 1 is nil"},
		{"nil skip", store, []httplimit.Option{httplimit.WithSkip(nil)}, "httplimit.WithSkip: nil skip function"},
		{"nil responder", store, []httplimit.Option{httplimit.WithResponder(nil)}, "httplimit.WithResponder: nil responder"},
		{"nil error handler", store, []httplimit.Option{httplimit.WithErrorHandler(nil)}, "httplimit.WithErrorHandler: nil error handler"},
		{"negative max delay", store, []httplimit.Option{httplimit.WithMaxDelay(-time.Second)}, "httplimit.WithMaxDelay: negative delay -1s"},
		{"the first invalid option is reported", store,
			[]httplimit.Option{ok, httplimit.WithResponder(nil), nil, httplimit.WithSkip(nil)}, "httplimit.WithResponder: nil responder"},
		{"nil core option", store, []httplimit.Option{httplimit.WithCore(nil)}, "option 0 is nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := httplimit.New(tc.store, []httplimit.Layer{layer(perMinute)}, tc.opts...)
			assert.Nil(t, f)
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.Equal(t, core.ErrInvalidOption.Error()+": "+tc.want, err.Error())
		})
	}
}

func TestHandle(t *testing.T) {
	errKey := errors.New("key function broke")
	tests := []struct {
		name        string
		store       func(t testing.TB) core.Store
		lopts       []core.Option
		failClosed  time.Duration // the policy's FailClosed
		key         keyfuncs.Func
		opts        []httplimit.Option
		proceed     bool
		status      int
		body        string
		header      map[string]string // fields expected, "" meaning absent
		resetIn     int64             // X-RateLimit-Reset: now + resetIn seconds, when not 0
		errContains []error
	}{
		{
			name: "allowed", proceed: true,
			header: map[string]string{"X-Ratelimit-Remaining": "0", "Ratelimit-Reset": "55", "Retry-After": ""}, resetIn: 55,
		},
		{
			name: "no headers configured", proceed: true,
			opts:   []httplimit.Option{httplimit.WithHeaders(headers.Config{})},
			header: map[string]string{"X-Ratelimit-Remaining": "", "Ratelimit-Remaining": ""},
		},
		{
			name:   "key not found",
			key:    mustKeyFunc(t)(keyfuncs.APIKeyHeader("X-Api-Key", nil)),
			status: 400, body: `{"error":"rate_limit_key_missing","message":"The request does not identify its client."}`,
			errContains: []error{keyfuncs.ErrNoKey},
		},
		{
			name: "key function fails",
			key: func(keyfuncs.Request) (string, error) {
				return "", errKey
			},
			status: 500, body: `{"error":"rate_limit_error","message":"Internal server error."}`,
			errContains: []error{errKey},
		},
		{
			name: "an empty key is no key",
			key: func(keyfuncs.Request) (string, error) {
				return "", nil
			},
			status: 400, errContains: []error{keyfuncs.ErrNoKey},
		},
		{
			name: "fallback key with FirstOf", proceed: true,
			key: mustKeyFunc(t)(keyfuncs.FirstOf(
				mustKeyFunc(t)(keyfuncs.APIKeyHeader("X-Api-Key", nil)), mustKeyFunc(t)(keyfuncs.Static("anonymous")))),
		},
		{
			name:       "fail closed without Retry-After configured",
			store:      func(testing.TB) core.Store { return failing{} },
			failClosed: time.Second,
			opts:       []httplimit.Option{httplimit.WithHeaders(headers.Config{XRateLimit: true})},
			status:     503, header: map[string]string{"Retry-After": "", "X-Ratelimit-Limit": ""},
			errContains: []error{limits.ErrStore},
		},
		{
			name:       "fail closed, replaced responder",
			store:      func(testing.TB) core.Store { return failing{} },
			failClosed: 1500 * time.Millisecond,
			opts: []httplimit.Option{httplimit.WithResponder(func(r keyfuncs.Request, w httplimit.Response, d core.Decision, err error) {
				if err != nil || d.Source != core.SourceFailMode {
					httplimit.DefaultResponder(r, w, d, err)
					return
				}
				_ = w.Write(http.StatusTooManyRequests, "text/plain", []byte(d.RetryAfter.String()))
			})},
			status: 429, body: "1.5s", header: map[string]string{"Retry-After": "2"},
			errContains: []error{limits.ErrStore},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var store core.Store = memStore(t)
			if tc.store != nil {
				store = tc.store(t)
			}
			var errs []error
			opts := append([]httplimit.Option{
				httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }),
			}, tc.opts...)
			f, err := newFlow(t, store, httplimit.Layer{Policy: limitertest.Named(perMinute, perMinute.Name, tc.failClosed), Key: tc.key}, tc.lopts, opts...)
			require.NoError(t, err)
			w := newResponse()
			before := time.Now()
			assert.Equal(t, tc.proceed, handle(f, newRequest(), w), "proceed")
			after := time.Now()
			if tc.proceed {
				assert.Zero(t, w.writes, "a response written to a request that proceeds: %d %q", w.status, w.body)
			} else {
				assert.Equal(t, 1, w.writes, "writes")
				assert.Equal(t, tc.status, w.status, "status")
			}
			if tc.body != "" {
				assert.Equal(t, tc.body, w.body, "body")
			}
			for k, v := range tc.header {
				assert.Equal(t, v, w.header.Get(k), k)
			}
			if tc.resetIn != 0 {
				checkReset(t, w.header.Get("X-Ratelimit-Reset"), before, after, tc.resetIn)
			}
			require.Len(t, errs, len(tc.errContains), "errors %v", errs)
			for i, target := range tc.errContains {
				assert.ErrorIs(t, errs[i], target)
			}
		})
	}
}

// checkReset checks an X-RateLimit-Reset value: the Unix second, rounded
// up, at which a quota whole resetIn seconds after the decision is whole
// again, the decision being made at t0, the store's time.
func checkReset(t *testing.T, got string, before, after time.Time, resetIn int64) {
	t.Helper()
	n, err := strconv.ParseInt(got, 10, 64)
	require.NoError(t, err, "X-RateLimit-Reset %q", got)
	// The store decides at t0 (clockstore) and says so: the flow writes
	// the reset from the store's time, not the real clock's.
	_, _ = before, after
	assert.GreaterOrEqual(t, n, t0.Unix()+resetIn, "X-RateLimit-Reset")
	assert.LessOrEqual(t, n, t0.Unix()+resetIn+1, "X-RateLimit-Reset")
}

func TestPaceStopsOnEndedContext(t *testing.T) {
	p := core.Policy{Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 2}
	f, err := newFlow(t, memStore(t), layer(p), nil, httplimit.WithMaxDelay(time.Hour))
	require.NoError(t, err)
	require.True(t, handle(f, newRequest(), newResponse()), "first request held")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newRequest()
	r.ctx = ctx
	w := newResponse()
	assert.False(t, handle(f, r, w), "request of an ended context proceeds")
	assert.Equal(t, 1, w.writes, "writes")
	assert.Equal(t, 499, w.status, "status: one a half-closed client can read")
}

func TestMaxDelayZeroDisablesPacing(t *testing.T) {
	p := core.Policy{Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 2}
	f, err := newFlow(t, memStore(t), layer(p), nil, httplimit.WithMaxDelay(0))
	require.NoError(t, err)
	done := make(chan bool, 2)
	go func() {
		done <- handle(f, newRequest(), newResponse())
		done <- handle(f, newRequest(), newResponse())
	}()
	for range 2 {
		select {
		case ok := <-done:
			assert.True(t, ok, "request held back")
		case <-time.After(testwait.D(10 * time.Second)):
			t.Fatal("request paced although MaxDelay is 0")
		}
	}
}

func TestLogErrors(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := httplimit.LogErrors(logger)
	h(newRequest(), errors.Join(limits.ErrStore, errors.New("redis: connection refused")))
	h(newRequest(), keyfuncs.ErrNoKey)
	h(newRequest(), keyfuncs.ErrNoKey)
	out := buf.String()
	for _, want := range []string{
		`level=WARN msg="ratelimit: store failed"`, "connection refused", "method=GET", "route=/",
		`level=WARN msg="ratelimit: no key in request, the first`, // see TestLogErrorsWarnsFirstOnce
		`level=DEBUG msg="ratelimit: no key in request"`,
	} {
		assert.Contains(t, out, want)
	}
}

func TestDefaultResponderDenied(t *testing.T) {
	for _, tc := range []struct {
		retry time.Duration
		body  string
	}{
		{time.Millisecond, `{"error":"rate_limit_exceeded","message":"Too many requests, retry after 1 second.","retry_after_seconds":1}`},
		{1001 * time.Millisecond, `{"error":"rate_limit_exceeded","message":"Too many requests, retry after 2 seconds.","retry_after_seconds":2}`},
		{time.Hour, `{"error":"rate_limit_exceeded","message":"Too many requests, retry after 3600 seconds.","retry_after_seconds":3600}`},
	} {
		w := newResponse()
		httplimit.DefaultResponder(newRequest(), w, core.Decision{RetryAfter: tc.retry}, nil)
		assert.Equal(t, 429, w.status, "RetryAfter %v: status", tc.retry)
		assert.Equal(t, "application/json", w.contentType, "RetryAfter %v: Content-Type", tc.retry)
		assert.Equal(t, tc.body, w.body, "RetryAfter %v: body", tc.retry)
	}
}

// failing is a store that is down.
type failing struct{ quietless }

func (failing) Take(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	return time.Time{}, errors.New("down")
}

// quietless gives a fake store the Peek and Refund that no test asks of
// it.
type quietless struct{}

var errQuiet = errors.New("fake store: no peeks, no refunds")

func (quietless) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errQuiet
}
func (quietless) Refund(context.Context, time.Time, []core.Request) error { return errQuiet }
func (failing) Reset(context.Context, string, core.Policy) error          { return errors.New("down") }

// BenchmarkHandle is the flow alone on the memory store, allowed path,
// default options (IP key, default headers).
func BenchmarkHandle(b *testing.B) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	f, err := newFlow(b, memStore(b), layer(p), nil)
	require.NoError(b, err)
	r, w := newRequest(), newResponse()
	b.ReportAllocs()
	for b.Loop() {
		if !handle(f, r, w) {
			b.Fatal("denied")
		}
	}
}

// BenchmarkHandleOneLayerLayered is BenchmarkHandle's one layer decided
// the way several are (Limiter.AllowLayers), as Methods make it: what
// New's shorter path for one plain layer (one Check to Limiter.AllowLayers,
// no per-layer Decisions) saves. The store is the memory store itself, as in
// BenchmarkHandleLayers (clockstore's TakeAll copies the requests to the heap).
func BenchmarkHandleOneLayerLayered(b *testing.B) {
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	f, err := httplimit.New(memStore(b), []httplimit.Layer{{Policy: p, Methods: []string{"GET"}}})
	require.NoError(b, err)
	r, w := newRequest(), newResponse()
	b.ReportAllocs()
	for b.Loop() {
		if !handle(f, r, w) {
			b.Fatal("denied")
		}
	}
}

// BenchmarkHandleDenied is the flow alone on the memory store, denied
// path (a flood past the limit), default options.
func BenchmarkHandleDenied(b *testing.B) {
	f, err := newFlow(b, memStore(b), layer(perMinute), nil)
	require.NoError(b, err)
	r := newRequest()
	handle(f, r, newResponse())
	w := newResponse()
	b.ReportAllocs()
	for b.Loop() {
		if handle(f, r, w) {
			b.Fatal("allowed")
		}
	}
}

// mustKeyFunc returns a function that unwraps what a keyfuncs constructor
// returns, failing t when the constructor fails.
// clientIPKey returns the Key of the ClientIP of opts, failing t when
// NewClientIP fails.
func clientIPKey(t testing.TB, opts ...keyfuncs.IPOption) keyfuncs.Func {
	t.Helper()
	c, err := keyfuncs.NewClientIP(opts...)
	require.NoError(t, err, "NewClientIP")
	return c.Key
}

func mustKeyFunc(t testing.TB) func(keyfuncs.Func, error) keyfuncs.Func {
	return func(fn keyfuncs.Func, err error) keyfuncs.Func {
		t.Helper()
		require.NoError(t, err, "key function constructor")
		return fn
	}
}
