// Package adapterstest is the behaviour suite every adapter passes: one
// table of cases, run through the real framework by a small Harness each
// adapter's tests implement. It also holds what the adapters' own tests
// share: serving a net/http app (ServeHTTP), the user-key check
// (CheckUserKey), the benchmark loop (Bench, BenchHTTP) and small
// helpers, so that each adapter's tests keep only what is its framework's.
package adapterstest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Body is what every route's handler answers, with status 200.
const Body = "ok"

// T0 is the frozen time of every limiter in the suite; X-RateLimit-Reset
// alone is written from the real clock (see checkNowPlus).
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Mount is one limiter middleware: New(Flow) of the adapter.
type Mount struct {
	Flow *httplimit.Flow
}

// Route is one route of the app under test. Path is written in Gin's,
// Echo's and Fiber's syntax ("/users/:id"); a harness whose framework
// writes it otherwise translates it (see Harness.Pattern).
type Route struct {
	Method string
	Path   string
	// Limits are mounted on this route only, in order, before its handler.
	Limits []Mount
}

// Spec describes an app: limiters mounted for every request with the
// framework's Use, then the routes. Every route's handler calls Served and
// answers 200 Body.
type Spec struct {
	// Authenticate, when set, runs before the Global mounts, as an app's
	// authentication middleware would: the request's context becomes what
	// it returns (the net/http request's context; in Fiber, the user
	// context), given the request's context and its header.
	Authenticate func(ctx context.Context, header func(string) string) context.Context
	Global       []Mount
	Routes       []Route
	// During, when set, is called by the handler of a request with
	// DuringHeader, before it answers: what happens to the world while a
	// handler runs (a store frozen between admission and settling).
	During func()

	hits   atomic.Int64
	mu     sync.Mutex
	served []time.Time
	// ok and failed count the handlers that answered 200 and 401.
	ok, failed atomic.Int64
}

// outcome counts a handler's answer of status, 200 or 401.
func (s *Spec) outcome(status int) {
	if status == http.StatusOK {
		s.ok.Add(1)
	} else {
		s.failed.Add(1)
	}
}

// Outcomes is how many handlers answered 200 and 401.
func (s *Spec) Outcomes() (ok, failed int64) { return s.ok.Load(), s.failed.Load() }

// Served records that a route's handler ran. Harnesses call it from every
// route handler.
func (s *Spec) Served() {
	s.hits.Add(1)
	s.mu.Lock()
	s.served = append(s.served, time.Now())
	s.mu.Unlock()
}

// Hits is how many times a route's handler ran.
func (s *Spec) Hits() int64 { return s.hits.Load() }

// lastServed is when a handler last ran.
func (s *Spec) lastServed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.served) == 0 {
		return time.Time{}
	}
	return s.served[len(s.served)-1]
}

// Request is one request to send.
type Request struct {
	Method     string
	Path       string
	RemoteAddr string // "ip:port"; the socket peer the framework must see
	Header     http.Header
	// Context, when set, is the request's context: the net/http request's
	// context, or the user context in Fiber (see fiberlimit).
	Context context.Context
}

// Response is what the client received.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// App is an app built from a Spec.
type App interface {
	// Do sends req through the framework and returns the response.
	Do(t testing.TB, req Request) Response
}

// Harness builds apps with one framework and its adapter.
type Harness interface {
	// Build returns an app built from spec.
	Build(t testing.TB, spec *Spec) App
	// Pattern translates a route path of the suite's syntax
	// ("/users/:id") into the pattern the framework reports for it.
	Pattern(path string) string
	// UseSeesRoute reports whether a limiter mounted with Use sees the
	// route that will answer (false for Fiber, where it sees the Use
	// prefix, "/").
	UseSeesRoute() bool
}

// Middlewares returns newMW(m.Flow) for each of ms, in order: the
// middleware of an adapter whose New is newMW.
func Middlewares[M any](ms []Mount, newMW func(*httplimit.Flow) M) []M {
	mws := make([]M, 0, len(ms))
	for _, m := range ms {
		mws = append(mws, newMW(m.Flow))
	}
	return mws
}

// NewFlow returns httplimit.New(store, layers, opts...), copts given by
// WithCore. It fails the test on an error. (Test Redis stores get a
// generous timeout from limitertest unless a test sets one: a store merely
// slow on a busy machine must not pass for a failed one.)
func NewFlow(t testing.TB, store core.Store, layers []httplimit.Layer, copts []core.Option, opts ...httplimit.Option) *httplimit.Flow {
	t.Helper()
	f, err := httplimit.New(store, layers, append([]httplimit.Option{
		httplimit.WithCore(copts...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// NewMount returns the Mount of the Flow of ly over store, whose decisions
// are made at T0 (clockstore.At), built by NewFlow.
func NewMount(t testing.TB, store core.Store, ly httplimit.Layer, copts []core.Option, opts ...httplimit.Option) Mount {
	t.Helper()
	return Mount{Flow: NewFlow(t, clockstore.At(store, T0), []httplimit.Layer{ly}, copts, opts...)}
}

// NewStore returns a memory store closed at the end of the test.
func NewStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatalf("memstore.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// MustCost is httplimit.CostByRoute(costs), failing the test on an error.
func MustCost(t testing.TB, costs map[string]int64) func(keyfuncs.Request) int64 {
	t.Helper()
	cost, err := httplimit.CostByRoute(costs)
	if err != nil {
		t.Fatal(err)
	}
	return cost
}

// named returns p named name, the name of its layer.
func named(name string, p core.Policy) core.Policy {
	p.Name = name
	return p
}

// FixedMount returns the Mount of a limit of limit requests a minute per
// key (fixed window; key nil: the client's address), over a memory store
// closed at the end of the test, whose decisions are made at T0.
func FixedMount(t testing.TB, limit int64, key keyfuncs.Func, opts ...httplimit.Option) Mount {
	t.Helper()
	return NewMount(t, NewStore(t), httplimit.Layer{Policy: fixed("", limit), Key: key}, nil, opts...)
}

// CheckPanics fails the test unless f panics. call names what f calls, for
// the message ("New(nil)").
func CheckPanics(t testing.TB, call string, f func()) {
	t.Helper()
	assert.Panics(t, f, "%s did not panic", call)
}

// FailingStore is a core.Store whose every call fails, as a store that
// lost its server does.
type FailingStore struct{}

// ErrDown is the error of every FailingStore call.
var ErrDown = errors.New("adapterstest: store is down")

// Take fails.
func (FailingStore) Take(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	return time.Time{}, ErrDown
}

// Peek fails.
func (FailingStore) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return ErrDown
}

// Refund fails.
func (FailingStore) Refund(context.Context, time.Time, []core.Request) error { return ErrDown }

// Reset fails.
func (FailingStore) Reset(context.Context, string, core.Policy) error { return ErrDown }

// errorRecorder collects the errors of a Flow (httplimit.WithErrorHandler),
// keeping the test's log quiet.
type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorRecorder) option() httplimit.Option {
	return httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) {
		e.mu.Lock()
		e.errs = append(e.errs, err)
		e.mu.Unlock()
	})
}

func (e *errorRecorder) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

// The request headers Answer obeys, for the settling cases (RunSettle).
const (
	// StatusHeader asks the handler to answer with this status.
	StatusHeader = "X-Test-Status"
	// ReportHeader asks the handler to httplimit.Report the request:
	// "fail" failed, "ok" succeeded.
	ReportHeader = "X-Test-Report"
	// ReportCostHeader asks the handler to httplimit.ReportCost this cost.
	ReportCostHeader = "X-Test-Report-Cost"
	// DuringHeader asks the handler to call Spec.During.
	DuringHeader = "X-Test-During"
	// WaitHeader asks the handler to wait until the request's context
	// ends (its client left), at most testwait.D(10 s), before it answers.
	WaitHeader = "X-Test-Wait"
)

// Answer is what every route's handler does, given the request's context
// (where httplimit.Report reaches its settlement) and its header; it
// returns the status to answer Body with: 200, unless the request asks
// for another (see StatusHeader).
func (s *Spec) Answer(ctx context.Context, header func(string) string) int {
	s.Served()
	if header(WaitHeader) != "" {
		select {
		case <-ctx.Done():
		case <-time.After(testwait.D(10 * time.Second)):
		}
	}
	if header(DuringHeader) != "" && s.During != nil {
		s.During()
	}
	switch header(ReportHeader) {
	case "fail":
		httplimit.Report(ctx, true)
	case "ok":
		httplimit.Report(ctx, false)
	}
	if v := header(ReportCostHeader); v != "" {
		n, _ := strconv.ParseInt(v, 10, 64)
		httplimit.ReportCost(ctx, n)
	}
	status := http.StatusOK
	if v := header(StatusHeader); v != "" {
		status, _ = strconv.Atoi(v)
	}
	if status == http.StatusUnauthorized || status == http.StatusOK {
		s.outcome(status)
	}
	return status
}
