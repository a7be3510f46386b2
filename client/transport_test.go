package client_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/client"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// refusing serves status with header on every request, counting them, and
// records the bodies it received.
type refusing struct {
	status int
	header http.Header
	hits   atomic.Int64
	mu     sync.Mutex
	bodies []string
}

func (s *refusing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.hits.Add(1)
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	for k, v := range s.header {
		w.Header()[k] = v
	}
	w.WriteHeader(s.status)
	_, _ = io.WriteString(w, "refused")
}

func serve(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func newTransport(t *testing.T, opts ...client.Option) *client.Transport {
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	tr, err := client.New(base, opts...)
	require.NoError(t, err)
	return tr
}

// TestAbsurdHeaders: whatever a server says, the Transport never waits
// beyond its limits, never spins (each retry waits at least the backoff
// base), and sends at most 1+MaxRetries requests. A delay longer than the
// maximum wait, however large (beyond a time.Duration too), is not
// retried: the server's answer is returned after one request. A malformed
// one (sign, fraction, unit, spaces within, not a date) is ignored, and the
// Transport backs off as when told nothing: 1+MaxRetries requests, each
// retry after at least the backoff base, never a storm.
func TestAbsurdHeaders(t *testing.T) {
	const retries, base, maxWait, maxTotal = 3, 20 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond
	far := time.Date(2067, 12, 31, 23, 59, 59, 0, time.UTC)
	rfc850 := strings.Replace(far.Format(time.RFC850), "UTC", "GMT", 1)
	for _, tt := range []struct {
		name   string
		header http.Header
		status int
		sent   int64 // requests that reach the server
	}{
		{"negative", http.Header{"Retry-After": {"-1"}}, 429, 1 + retries},
		{"zero", http.Header{"Retry-After": {"0"}}, 429, 1 + retries},
		{"huge", http.Header{"Retry-After": {"99999999999999999999"}}, 429, 1},
		{"just over a Duration", http.Header{"Retry-After": {"9300000000"}}, 429, 1},
		{"MaxInt64 seconds", http.Header{"Retry-After": {"9223372036854775807"}}, 429, 1},
		{"30 digits", http.Header{"Retry-After": {strings.Repeat("123", 10)}}, 503, 1},
		{"4096 digits", http.Header{"Retry-After": {strings.Repeat("9", 4096)}}, 429, 1},
		{"one year", http.Header{"Retry-After": {"31536000"}}, 429, 1},
		{"repeated, the longest counts", http.Header{"Retry-After": {"0", "9300000000"}}, 429, 1},
		{"longer than the max wait", http.Header{"Retry-After": {"3600"}}, 503, 1},
		{"malformed", http.Header{"Retry-After": {"soon"}}, 503, 1 + retries},
		{"plus sign", http.Header{"Retry-After": {"+9300000000"}}, 429, 1 + retries},
		{"negative huge", http.Header{"Retry-After": {"-9300000000"}}, 429, 1 + retries},
		{"fraction", http.Header{"Retry-After": {"3600.5"}}, 429, 1 + retries},
		{"exponent", http.Header{"Retry-After": {"1e9"}}, 429, 1 + retries},
		{"unit", http.Header{"Retry-After": {"3600s"}}, 429, 1 + retries},
		{"space within", http.Header{"Retry-After": {"36 00"}}, 429, 1 + retries},
		{"hex", http.Header{"Retry-After": {"0x10"}}, 429, 1 + retries},
		{"giant garbage", http.Header{"Retry-After": {strings.Repeat("9", 4096) + "x"}}, 429, 1 + retries},
		{"date in the past", http.Header{"Retry-After": {"Mon, 01 Jan 1990 00:00:00 GMT"}}, 429, 1 + retries},
		{"date far ahead", http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}}, 429, 1},
		{"RFC 850 date far ahead", http.Header{"Retry-After": {rfc850}}, 429, 1},
		{"asctime date far ahead", http.Header{"Retry-After": {"Fri Dec 31 23:59:59 9999"}}, 429, 1},
		{"date with a five-digit year", http.Header{"Retry-After": {"Fri, 31 Dec 99999 23:59:59 GMT"}}, 429, 1 + retries},
		{"reset over a Duration", http.Header{"Ratelimit-Reset": {"9300000000"}}, 429, 1},
		{"malformed retry-after spoils only itself", http.Header{"Retry-After": {"soon"}, "Ratelimit-Reset": {"9300000000"}}, 429, 1},
		{"epoch zero", http.Header{"X-Ratelimit-Reset": {"0"}}, 429, 1 + retries},
		{"epoch far ahead", http.Header{"X-Ratelimit-Reset": {"9223372036854775807"}}, 429, 1},
		{"epoch of 30 digits", http.Header{"X-Ratelimit-Reset": {strings.Repeat("123", 10)}}, 429, 1},
		{"epoch year 9999", http.Header{"X-Ratelimit-Reset": {"253402300799"}}, 429, 1},
		{"exhausted until 9999", http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"253402300799"}}, 429, 1},
		{"exhausted, reset over a Duration", http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"9300000000"}}, 429, 1},
		{"NaN", http.Header{"Ratelimit": {`"api";r=0;t=NaN`}}, 429, 1 + retries},
		{"negative reset", http.Header{"Ratelimit-Reset": {"-3"}, "Ratelimit": {`"api";r=-1;t=-1`}}, 429, 1 + retries},
		{"not a rate limit", http.Header{"Retry-After": {"1"}}, 500, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := &refusing{status: tt.status, header: tt.header}
			url := serve(t, srv)
			tr := newTransport(t, client.WithMaxRetries(retries), client.WithBackoff(base),
				client.WithMaxWait(maxWait), client.WithMaxTotalWait(maxTotal), client.WithPacing(0))
			hc := &http.Client{Transport: tr}
			for range 2 { // the second request checks that pacing holds nothing absurd either
				start := time.Now()
				res, err := hc.Get(url)
				took := time.Since(start)
				require.NoError(t, err)
				require.NoError(t, res.Body.Close())
				assert.Equal(t, tt.status, res.StatusCode, "the last answer is returned")
				assert.Less(t, took, maxTotal+testwait.D(time.Second), "never beyond the total wait (and a busy machine's delays)")
				if tt.sent > 1 {
					assert.GreaterOrEqual(t, took, time.Duration(tt.sent-1)*base, "every retry waits")
				}
			}
			assert.Equal(t, 2*tt.sent, srv.hits.Load(), "requests sent")
		})
	}
}

// once refuses the first request with 429 and the given header, then
// serves 200.
func once(srv *refusing, header http.Header) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			srv.status, srv.header = http.StatusTooManyRequests, header
		} else {
			srv.status, srv.header = http.StatusOK, nil
		}
		srv.ServeHTTP(w, r)
	})
}

// onlyReader hides strings.Reader so that http.NewRequest sets no GetBody.
type onlyReader struct{ io.Reader }

func TestReplaysOnlyWhatItCan(t *testing.T) {
	for _, tt := range []struct {
		name   string
		method string
		body   func() io.Reader
		sent   int64
		status int
	}{
		{"GET", http.MethodGet, nil, 2, 200},
		{"DELETE", http.MethodDelete, nil, 2, 200},
		{"POST without body", http.MethodPost, nil, 2, 200},
		{"POST with GetBody", http.MethodPost, func() io.Reader { return strings.NewReader("payload") }, 2, 200},
		{"PUT with GetBody", http.MethodPut, func() io.Reader { return strings.NewReader("payload") }, 2, 200},
		{"POST whose body cannot be replayed", http.MethodPost, func() io.Reader { return onlyReader{strings.NewReader("payload")} }, 1, 429},
		{"PUT whose body cannot be replayed", http.MethodPut, func() io.Reader { return onlyReader{strings.NewReader("payload")} }, 1, 429},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := &refusing{}
			url := serve(t, once(srv, http.Header{"Retry-After": {"0"}}))
			hc := &http.Client{Transport: newTransport(t, client.WithBackoff(time.Millisecond))}
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, err := http.NewRequest(tt.method, url, body)
			require.NoError(t, err)
			res, err := hc.Do(req)
			require.NoError(t, err)
			require.NoError(t, res.Body.Close())
			assert.Equal(t, tt.status, res.StatusCode)
			assert.Equal(t, tt.sent, srv.hits.Load())
			if tt.body != nil {
				for _, b := range srv.bodies {
					assert.Equal(t, "payload", b, "every attempt carries the whole body")
				}
			}
		})
	}
}

// closeCounter counts the response bodies closed.
type closeCounter struct {
	base   http.RoundTripper
	opened atomic.Int64
	closed atomic.Int64
}

type countedBody struct {
	io.ReadCloser
	c *closeCounter
}

func (b countedBody) Close() error { b.c.closed.Add(1); return b.ReadCloser.Close() }

func (c *closeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(r)
	if err == nil {
		c.opened.Add(1)
		res.Body = countedBody{res.Body, c}
	}
	return res, err
}

func TestClosesRetriedBodies(t *testing.T) {
	srv := &refusing{status: 429}
	url := serve(t, srv)
	cc := &closeCounter{base: http.DefaultTransport.(*http.Transport).Clone()}
	tr, err := client.New(cc, client.WithMaxRetries(3), client.WithBackoff(time.Millisecond))
	require.NoError(t, err)
	res, err := (&http.Client{Transport: tr}).Get(url)
	require.NoError(t, err)
	assert.Equal(t, int64(4), cc.opened.Load())
	assert.Equal(t, int64(3), cc.closed.Load(), "the three retried responses are closed, the last one is the caller's")
	require.NoError(t, res.Body.Close())
	assert.Equal(t, int64(4), cc.closed.Load())
}

func TestContextCancelsWait(t *testing.T) {
	srv := &refusing{status: 429, header: http.Header{"Retry-After": {"20"}}}
	url := serve(t, srv)
	tr := newTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	// Scaled for a busy machine, and kept below the 20 s it must not wait.
	assert.Less(t, time.Since(start), min(testwait.D(2*time.Second), 15*time.Second), "the 20 s wait ends with the context")
	assert.Equal(t, int64(1), srv.hits.Load())
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]client.Option{
		"negative retries":  client.WithMaxRetries(-1),
		"zero wait":         client.WithMaxWait(0),
		"negative total":    client.WithMaxTotalWait(-time.Second),
		"backoff under 1ms": client.WithBackoff(time.Microsecond),
		"negative hosts":    client.WithPacing(-1),
		"nil option":        nil,
		"backoff over wait": client.WithBackoff(time.Minute),
	} {
		_, err := client.New(nil, opt)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
	_, err := client.New(nil, client.WithMaxRetries(0), client.WithPacing(0))
	assert.NoError(t, err)
}

// TestPacingConcurrent has many goroutines share one paced Transport: the
// race detector checks the per-host state.
func TestPacingConcurrent(t *testing.T) {
	var hits atomic.Int64
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Ratelimit-Remaining", "1")
		w.Header().Set("Ratelimit-Reset", "1")
		hits.Add(1)
	}))
	hc := &http.Client{Transport: newTransport(t, client.WithPacing(2))}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 4 {
		wg.Go(func() {
			for range 10 {
				res, err := hc.Get(url)
				if err == nil {
					err = res.Body.Close()
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int64(40), hits.Load())
}

// TestContextCancelsPacing: a request held by pacing until the reset is
// let go, unsent, when its context ends.
func TestContextCancelsPacing(t *testing.T) {
	srv := &refusing{status: http.StatusOK, header: http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"20"}}}
	url := serve(t, srv)
	tr := newTransport(t, client.WithPacing(0))
	res, err := (&http.Client{Transport: tr}).Get(url)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), min(testwait.D(2*time.Second), 15*time.Second), "the 20 s hold ends with the context")
	assert.Equal(t, int64(1), srv.hits.Load(), "the held request is not sent")
}

// firstThen answers the first request with status and Retry-After: 0, and
// every later one with 200. It counts the requests, and records whether
// each carried an Idempotency-Key field and what body.
type firstThen struct {
	status int
	hits   atomic.Int64
	mu     sync.Mutex
	keys   []bool
	bodies []string
}

func (s *firstThen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	_, key := r.Header["Idempotency-Key"]
	s.keys = append(s.keys, key)
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	if s.hits.Add(1) == 1 {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(s.status)
	}
}

// TestRetriesByMethod checks the package's table of which responses are
// retried for which requests, counting the requests the server receives:
// a 429 for any method; a 503 for the idempotent methods of RFC 9110, for a
// request with an idempotency key, and for any method with
// WithRetryNonIdempotent only.
func TestRetriesByMethod(t *testing.T) {
	payload := func() io.Reader { return strings.NewReader("payload") }
	for _, tt := range []struct {
		name      string
		status    int
		method    string
		body      func() io.Reader
		header    http.Header
		anyMethod bool
		sent      int64
	}{
		{"429 GET", 429, http.MethodGet, nil, nil, false, 2},
		{"429 POST", 429, http.MethodPost, payload, nil, false, 2},
		{"429 PATCH", 429, http.MethodPatch, payload, nil, false, 2},
		{"503 GET", 503, http.MethodGet, nil, nil, false, 2},
		{"503 HEAD", 503, http.MethodHead, nil, nil, false, 2},
		{"503 OPTIONS", 503, http.MethodOptions, nil, nil, false, 2},
		{"503 TRACE", 503, http.MethodTrace, nil, nil, false, 2},
		{"503 PUT", 503, http.MethodPut, payload, nil, false, 2},
		{"503 DELETE", 503, http.MethodDelete, nil, nil, false, 2},
		{"503 POST", 503, http.MethodPost, payload, nil, false, 1},
		{"503 POST without body", 503, http.MethodPost, nil, nil, false, 1},
		{"503 PATCH", 503, http.MethodPatch, payload, nil, false, 1},
		{"503 custom method", 503, "PURGE", nil, nil, false, 1},
		{"503 lower-case get is not GET", 503, "get", nil, nil, false, 1},
		{"503 POST with Idempotency-Key", 503, http.MethodPost, payload, http.Header{"Idempotency-Key": {"k1"}}, false, 2},
		{"503 POST with X-Idempotency-Key", 503, http.MethodPost, payload, http.Header{"X-Idempotency-Key": {"k1"}}, false, 2},
		{"503 POST with an unsent Idempotency-Key", 503, http.MethodPost, payload, http.Header{"Idempotency-Key": nil}, false, 2},
		{"503 POST WithRetryNonIdempotent", 503, http.MethodPost, payload, nil, true, 2},
		{"503 PATCH WithRetryNonIdempotent", 503, http.MethodPatch, payload, nil, true, 2},
		{"503 PUT whose body cannot be replayed", 503, http.MethodPut, func() io.Reader { return onlyReader{strings.NewReader("payload")} }, nil, false, 1},
		{"503 POST with key whose body cannot be replayed", 503, http.MethodPost, func() io.Reader { return onlyReader{strings.NewReader("payload")} }, http.Header{"Idempotency-Key": {"k1"}}, true, 1},
		{"500 GET", 500, http.MethodGet, nil, nil, true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := &firstThen{status: tt.status}
			url := serve(t, srv)
			opts := []client.Option{client.WithBackoff(time.Millisecond)}
			if tt.anyMethod {
				opts = append(opts, client.WithRetryNonIdempotent())
			}
			hc := &http.Client{Transport: newTransport(t, opts...)}
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, err := http.NewRequest(tt.method, url, body)
			require.NoError(t, err)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			res, err := hc.Do(req)
			require.NoError(t, err)
			require.NoError(t, res.Body.Close())
			assert.Equal(t, tt.sent, srv.hits.Load(), "requests the server received")
			want := tt.status
			if tt.sent > 1 {
				want = http.StatusOK
			}
			assert.Equal(t, want, res.StatusCode)
			srv.mu.Lock()
			defer srv.mu.Unlock()
			for i, b := range srv.bodies {
				if tt.body != nil {
					assert.Equal(t, "payload", b, "attempt %d carries the whole body", i)
				}
				_, key := tt.header["Idempotency-Key"]
				assert.Equal(t, key && tt.header["Idempotency-Key"] != nil, srv.keys[i], "a nil Idempotency-Key is not sent")
			}
		})
	}
}

// TestDrainedConnectionReused: the body of a retried response is drained
// while the Transport waits, so that the retry goes on the same
// connection.
func TestDrainedConnectionReused(t *testing.T) {
	srv := &refusing{}
	s := httptest.NewUnstartedServer(once(srv, http.Header{"Retry-After": {"1"}}))
	var conns atomic.Int64
	s.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	res, err := (&http.Client{Transport: newTransport(t)}).Get(s.URL)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, int64(2), srv.hits.Load())
	assert.Equal(t, int64(1), conns.Load(), "the retry reused the drained connection")
}
