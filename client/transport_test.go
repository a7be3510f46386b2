package client_test

import (
	"context"
	"io"
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
// base), and sends at most 1+MaxRetries requests.
func TestAbsurdHeaders(t *testing.T) {
	const retries, base, maxWait, maxTotal = 3, 20 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond
	for _, tt := range []struct {
		name   string
		header http.Header
		status int
		sent   int64 // requests that reach the server
	}{
		{"negative", http.Header{"Retry-After": {"-1"}}, 429, 1 + retries},
		{"zero", http.Header{"Retry-After": {"0"}}, 429, 1 + retries},
		{"huge", http.Header{"Retry-After": {"99999999999999999999"}}, 429, 1 + retries},
		{"longer than the max wait", http.Header{"Retry-After": {"3600"}}, 503, 1},
		{"malformed", http.Header{"Retry-After": {"soon"}}, 503, 1 + retries},
		{"date in the past", http.Header{"Retry-After": {"Mon, 01 Jan 1990 00:00:00 GMT"}}, 429, 1 + retries},
		{"date far ahead", http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}}, 429, 1},
		{"epoch zero", http.Header{"X-Ratelimit-Reset": {"0"}}, 429, 1 + retries},
		{"epoch far ahead", http.Header{"X-Ratelimit-Reset": {"9223372036854775807"}}, 429, 1 + retries},
		{"epoch year 9999", http.Header{"X-Ratelimit-Reset": {"253402300799"}}, 429, 1},
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
				assert.Less(t, took, maxTotal+time.Second, "never beyond the total wait")
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
	assert.Less(t, time.Since(start), 2*time.Second, "the 20 s wait ends with the context")
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
	assert.Less(t, time.Since(start), 2*time.Second, "the 20 s hold ends with the context")
	assert.Equal(t, int64(1), srv.hits.Load(), "the held request is not sent")
}
