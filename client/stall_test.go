package client_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/client"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// stallServer is a raw HTTP/1.1 server on a loopback socket: it answers
// every request with the same bytes, a response whose body is cut short,
// and then neither writes nor closes, as a stalled server does. It counts
// the connections it accepted and those that the client closed.
type stallServer struct {
	ln             net.Listener
	response       string
	accepted       atomic.Int64
	closedByClient atomic.Int64
	stopping       atomic.Bool
	mu             sync.Mutex
	conns          []net.Conn
	wg             sync.WaitGroup
}

func startStallServer(t *testing.T, response string) *stallServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &stallServer{ln: ln, response: response}
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
			s.wg.Go(func() { s.handle(conn) })
		}
	})
	t.Cleanup(func() {
		s.stopping.Store(true)
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// handle reads one request, writes the stalled response and then reads
// until the client closes the connection (or the test ends).
func (s *stallServer) handle(conn net.Conn) {
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	if _, err := io.WriteString(conn, s.response); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, br) // returns when the client closes
	if !s.stopping.Load() {
		s.closedByClient.Add(1)
	}
}

// TestStalledBody: a 429 whose body stalls cannot hold RoundTrip past its
// limits. With Retry-After: 1 and WithMaxTotalWait(2s), the Transport
// waits 1 s twice (three requests, each on a new connection since the
// stalled one cannot be reused) and returns the third answer after about
// 2 s; every connection is closed by the client once the caller closes the
// last body, and the goroutines that drained the bodies are gone. Before,
// the drain of the first body blocked until the request's context ended.
func TestStalledBody(t *testing.T) {
	const head = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n"
	for _, tt := range []struct{ name, response string }{
		{"declared longer than the drain limit", head + "Content-Length: 100000\r\n\r\nrefused"},
		{"declared shorter than the drain limit", head + "Content-Length: 10\r\n\r\nrefused"},
		{"chunked", head + "Transfer-Encoding: chunked\r\n\r\n7\r\nrefused\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const maxTotal, margin = 2 * time.Second, 1500 * time.Millisecond
			srv := startStallServer(t, tt.response)
			base := http.DefaultTransport.(*http.Transport).Clone()
			tr, err := client.New(base, client.WithMaxTotalWait(maxTotal))
			require.NoError(t, err)
			goroutines := runtime.NumGoroutine()

			// The context is only a safety net, so that the test ends
			// when RoundTrip does not.
			ctx, cancel := context.WithTimeout(context.Background(), testwait.D(6*time.Second))
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.ln.Addr().String()+"/", nil)
			require.NoError(t, err)
			start := time.Now()
			res, err := tr.RoundTrip(req)
			took := time.Since(start)
			require.NoError(t, err, "after %v", took)
			assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			assert.Less(t, took, maxTotal+testwait.D(margin), "RoundTrip returns within its total wait")
			assert.GreaterOrEqual(t, took, maxTotal, "it waited as told, twice")
			assert.Equal(t, int64(3), srv.accepted.Load(), "requests sent, each on its own connection")

			buf := make([]byte, 64)
			n, err := io.ReadAtLeast(res.Body, buf, 1)
			require.NoError(t, err)
			assert.Equal(t, "refused", string(buf[:n]), "the last body is the caller's, unread")
			require.NoError(t, res.Body.Close())
			base.CloseIdleConnections()
			assert.Eventually(t, func() bool { return srv.closedByClient.Load() == 3 }, testwait.D(10*time.Second), 10*time.Millisecond,
				"the client closed every connection (%d of %d)", srv.closedByClient.Load(), srv.accepted.Load())
			// Polled here, not by assert.Eventually, whose condition runs
			// in a goroutine of its own.
			for deadline := testwait.Deadline(10 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if !assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "no goroutine left behind") {
				b := make([]byte, 1<<20)
				t.Logf("goroutines:\n%s", b[:runtime.Stack(b, true)])
			}
		})
	}
}

// TestStalledBodyContext: a context that ends while a stalled body is
// being drained ends RoundTrip at once, and the body is closed.
func TestStalledBodyContext(t *testing.T) {
	srv := startStallServer(t, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 20\r\nContent-Length: 10\r\n\r\nrefused")
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	tr, err := client.New(base)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.ln.Addr().String()+"/", nil)
	require.NoError(t, err)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err = tr.RoundTrip(req)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	// Scaled for a busy machine, and kept below the 20 s it must not wait.
	assert.Less(t, time.Since(start), min(testwait.D(3*time.Second), 15*time.Second), "the 20 s wait ends with the context")
	assert.Eventually(t, func() bool { return srv.closedByClient.Load() == 1 }, testwait.D(10*time.Second), 10*time.Millisecond,
		"the stalled connection is closed")
}
