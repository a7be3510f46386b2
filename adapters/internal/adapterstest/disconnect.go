package adapterstest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Disconnect attack parameters: a limit of disconnectLimit per hour, and
// disconnectRequests half-closed requests from one client against it.
const (
	disconnectLimit    = 2
	disconnectRequests = 36
)

// holdHeader asks the key function of the disconnect suite to wait until
// the request's context ends: the client is then certainly gone before
// the decision.
const holdHeader = "X-Test-Hold"

// disconnectKind is one way a client leaves.
type disconnectKind int

const (
	leaveAfterRequest   disconnectKind = iota // FIN right after the request
	leaveBeforeBody                           // FIN in the middle of a POST body
	leaveBeforeDecision                       // FIN, and the decision waits for the server to notice
)

func (k disconnectKind) request() RawRequest {
	switch k {
	case leaveBeforeBody:
		return RawRequest{Method: "POST", Path: "/upload", Body: "partial", ContentLength: 100, HalfClose: true}
	case leaveBeforeDecision:
		return RawRequest{Header: http.Header{holdHeader: {"1"}}, HalfClose: true}
	}
	return RawRequest{HalfClose: true}
}

// RunDisconnects is the attack of issue #6: one client sends request after
// request and closes its side of each connection at once (it can still
// read the answer), or in the middle of its body, against a limit of 2 per
// hour. Whatever the store (memory; Redis, through a default go-redis
// client and a ContextTimeoutEnabled one) and whatever the Limiter does on
// a store failure (fail open, fail closed, fall back to memory), the
// handler runs at most twice, every 200 is one of those runs, and every
// other answer is 429 or 499. srv is the Redis server, shared by the
// subtests (each with a key prefix of its own).
func RunDisconnects(t *testing.T, h SocketHarness, srv *redistest.Server) {
	stores := socketStores(t, srv, "disconnect", true)
	for _, s := range stores {
		for _, m := range failModes {
			t.Run(s.name+"/"+m.name, func(t *testing.T) {
				runDisconnects(t, h, s.new(t), m.failClosed, m.opts(t))
			})
		}
	}
	for _, s := range stores {
		t.Run(s.name+"/pipelined", func(t *testing.T) { runPipelined(t, h, s.new(t)) })
	}
	if h.CancelsOnDisconnect() {
		t.Run("while paced", func(t *testing.T) { runPacedDisconnects(t, h) })
	}
}

// runPipelined sends a burst of pipelined requests on one connection and
// closes its side at once: the last ones are read while the client is
// gone. The handler still runs at most disconnectLimit times.
func runPipelined(t *testing.T, h SocketHarness, store core.Store) {
	p := core.Policy{Name: "pipelined", Algorithm: core.SlidingWindowLog, Limit: disconnectLimit, Window: time.Hour}
	var errs errorRecorder
	spec := &Spec{
		Global: []Mount{{Flow: NewFlow(t, store, []httplimit.Layer{{Policy: p}}, nil, errs.option())}},
		Routes: []Route{{Method: "GET", Path: "/"}},
	}
	c := Dial(t, h.Serve(t, spec))
	var burst strings.Builder
	for range pipelined {
		burst.WriteString(RawRequest{}.encode())
	}
	require.NoError(t, c.c.SetDeadline(time.Now().Add(ioGuard)))
	_, err := io.WriteString(c.c, burst.String())
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	statuses := map[int]int{}
	for range pipelined {
		res, err := c.Read()
		if err != nil {
			break // the server may stop reading once the client is gone
		}
		statuses[res.Status]++
		assert.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests, statusClientClosed}, res.Status)
	}
	t.Logf("statuses %v, handler ran %d times", statuses, spec.Hits())
	assert.NotEmpty(t, statuses, "no response at all")
	assert.LessOrEqual(t, spec.Hits(), int64(disconnectLimit), "handler runs over a limit of %d", disconnectLimit)
	assert.Equal(t, spec.Hits(), int64(statuses[http.StatusOK]), "200s and handler runs differ")
	for _, err := range errs.all() {
		assert.NotErrorIs(t, err, limits.ErrStore)
	}
}

// pipelined is how many requests runPipelined sends in one burst.
const pipelined = 12

// decidedStore is a memory store that signals each decision it made.
type decidedStore struct {
	*memstore.Store
	decided chan struct{}
}

func (s decidedStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	defer func() { s.decided <- struct{}{} }()
	return s.Store.Take(ctx, now, reqs, out)
}

// runPacedDisconnects checks clients that leave while the leaky bucket
// paces their admitted request: the handler never runs for them, and they
// read 499.
func runPacedDisconnects(t *testing.T, h SocketHarness) {
	store := decidedStore{Store: NewStore(t), decided: make(chan struct{}, 8)}
	p := core.Policy{Name: "paced", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 4}
	checkPacedDisconnects(t, h, store, []httplimit.Layer{{Policy: p}}, store.decided)
}

// checkPacedDisconnects serves the Flow of layers over store, which
// signals each decision on decided, and sends a request that leaves at once,
// then three that the limiter paces for an hour and whose clients leave
// meanwhile: they read 499, the handler runs for the first only, and the
// error handler hears context.Canceled three times.
func checkPacedDisconnects(t *testing.T, h SocketHarness, store core.Store, layers []httplimit.Layer, decided <-chan struct{}) {
	var errs errorRecorder
	spec := &Spec{
		Global: []Mount{{Flow: NewFlow(t, store, layers, nil, httplimit.WithMaxDelay(time.Hour), errs.option())}},
		Routes: []Route{{Method: "GET", Path: "/"}},
	}
	addr := h.Serve(t, spec)
	waitDecided := func() {
		t.Helper()
		select {
		case <-decided:
		case <-time.After(ioGuard):
			t.Fatal("no decision")
		}
	}

	res := Send(t, addr, RawRequest{})
	require.Equal(t, http.StatusOK, res.Status, "the first request leaves at once")
	waitDecided()
	for i := range 3 {
		c := Dial(t, addr)
		require.NoError(t, c.Write(RawRequest{}))
		waitDecided() // admitted with an hour's Delay: now paced
		require.NoError(t, c.CloseWrite())
		res, err := c.Read()
		require.NoError(t, err)
		assert.Equal(t, statusClientClosed, res.Status, "paced request %d", i)
		assert.Equal(t, canceledBody, res.Body, "paced request %d", i)
	}
	assert.Equal(t, int64(1), spec.Hits(), "handler runs")
	got := errs.all()
	require.Len(t, got, 3)
	for _, err := range got {
		assert.ErrorIs(t, err, context.Canceled)
	}
}

func runDisconnects(t *testing.T, h SocketHarness, store core.Store, fc time.Duration, lopts []core.Option) {
	p := core.Policy{Name: "disconnect", Algorithm: core.SlidingWindowLog, Limit: disconnectLimit, Window: time.Hour, FailClosed: fc}
	// A generous timeout: a store that is merely slow on a loaded machine
	// must not pass for the failure under test.
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	hold := func(r keyfuncs.Request) (string, error) {
		if r.Header(holdHeader) != "" {
			select {
			case <-r.Context().Done():
			case <-time.After(ioGuard):
			}
		}
		return ip(r)
	}
	var errs errorRecorder
	spec := &Spec{
		Global: []Mount{{Flow: NewFlow(t, store, []httplimit.Layer{{Policy: p, Key: hold}}, lopts, errs.option())}},
		Routes: []Route{{Method: "GET", Path: "/"}, {Method: "POST", Path: "/upload"}},
	}
	addr := h.Serve(t, spec)

	kinds := []disconnectKind{leaveAfterRequest, leaveBeforeBody}
	if h.CancelsOnDisconnect() {
		// First: the first request finds the quota whole.
		kinds = append([]disconnectKind{leaveBeforeDecision}, kinds...)
	}
	var ok int64
	statuses := map[int]int{}
	for i := range disconnectRequests {
		kind := kinds[i%len(kinds)]
		res, err := Dial(t, addr).Try(kind.request())
		if kind == leaveBeforeBody && err != nil {
			statuses[0]++ // a server that reads the body first may drop the connection
			continue
		}
		require.NoError(t, err, "request %d", i)
		statuses[res.Status]++
		switch res.Status {
		case http.StatusOK:
			ok++
			assert.Equal(t, Body, res.Body)
			assert.NotEqual(t, leaveBeforeDecision, kind, "request %d: the client left before the decision, yet got 200", i)
		case http.StatusTooManyRequests, statusClientClosed:
		case http.StatusBadRequest:
			assert.Equal(t, leaveBeforeBody, kind, "request %d: 400", i) // the server's own answer to a short body
		default:
			t.Errorf("request %d: status %d, body %q", i, res.Status, res.Body)
		}
	}
	t.Logf("statuses %v, handler ran %d times", statuses, spec.Hits())
	assert.LessOrEqual(t, spec.Hits(), int64(disconnectLimit), "handler runs over a limit of %d", disconnectLimit)
	assert.Equal(t, spec.Hits(), ok, "200s and handler runs differ")

	var canceled, failed int
	for _, err := range errs.all() {
		if errors.Is(err, limits.ErrStore) {
			if failed++; failed == 1 {
				t.Errorf("a disconnect reported as a store failure: %v", err)
			}
		}
		if errors.Is(err, context.Canceled) {
			canceled++
		}
	}
	assert.Zero(t, failed, "store failures reported")
	if h.CancelsOnDisconnect() {
		assert.Positive(t, canceled, "no disconnect was reported as context.Canceled")
	}
}
