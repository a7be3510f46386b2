package adapterstest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// SocketHarness serves apps on real loopback sockets, for the suites that
// must go through the framework's own server: what a client that closes
// its side of the connection, or a panic, does to it.
type SocketHarness interface {
	// Serve starts the app of spec on a listener on 127.0.0.1, stopped when
	// the test ends, and returns its address. Every route handler calls
	// spec.Served and answers 200 Body; no recovery middleware is added.
	Serve(t testing.TB, spec *Spec) string
	// CancelsOnDisconnect reports whether the framework's server ends a
	// request's context when its client closes its side of the connection:
	// net/http does, fasthttp (Fiber) never does.
	CancelsOnDisconnect() bool
}

// ioGuard bounds every read and write of the socket client, so that a
// stuck server fails the test instead of hanging it.
var ioGuard = testwait.D(10 * time.Second)

// ListenHTTP serves h with net/http on a free port of 127.0.0.1 until the
// test ends and returns the address.
func ListenHTTP(t testing.TB, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// RawRequest is a request written byte for byte on a socket, HTTP/1.1.
type RawRequest struct {
	Method string // GET when empty
	Path   string // "/" when empty
	Header http.Header
	// Body is sent after the header. ContentLength is announced when
	// positive, and may exceed len(Body): the client then stops before the
	// end of its body.
	Body          string
	ContentLength int
	// HalfClose closes the client's side of the connection (TCP FIN) once
	// the request is written: the client can still read the response.
	HalfClose bool
}

// Conn is a client connection to a server under test, kept alive from one
// request to the next.
type Conn struct {
	c  *net.TCPConn
	br *bufio.Reader
}

// Dial connects to addr; the connection is closed when the test ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioGuard)
	require.NoError(t, err, "dial %s", addr)
	t.Cleanup(func() { _ = c.Close() })
	return &Conn{c: c.(*net.TCPConn), br: bufio.NewReader(c)}
}

// Do writes req and reads its response, failing the test when there is
// none. After a HalfClose request, the connection can serve no other.
func (c *Conn) Do(t testing.TB, req RawRequest) Response {
	t.Helper()
	res, err := c.Try(req)
	require.NoError(t, err, "%s %s", req.Method, req.Path)
	return res
}

// Try is Do returning the error, for requests that a server may rightly
// leave unanswered (a truncated body).
func (c *Conn) Try(req RawRequest) (Response, error) {
	if err := c.Write(req); err != nil {
		return Response{}, err
	}
	return c.Read()
}

// Write writes req, and half-closes the connection when req says so.
func (c *Conn) Write(req RawRequest) error {
	if err := c.c.SetDeadline(time.Now().Add(ioGuard)); err != nil {
		return err
	}
	if _, err := io.WriteString(c.c, req.encode()); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	if req.HalfClose {
		return c.CloseWrite()
	}
	return nil
}

// CloseWrite closes the client's side of the connection (TCP FIN); the
// response can still be read.
func (c *Conn) CloseWrite() error {
	if err := c.c.CloseWrite(); err != nil {
		return fmt.Errorf("half-close: %w", err)
	}
	return nil
}

// Read reads one response.
func (c *Conn) Read() (Response, error) {
	if err := c.c.SetDeadline(time.Now().Add(ioGuard)); err != nil {
		return Response{}, err
	}
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return Response{}, fmt.Errorf("read response: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return Response{}, fmt.Errorf("read body: %w", err)
	}
	return Response{Status: res.StatusCode, Header: res.Header, Body: string(body)}, nil
}

// Send sends req on a connection of its own and returns the response.
func Send(t testing.TB, addr string, req RawRequest) Response {
	t.Helper()
	return Dial(t, addr).Do(t, req)
}

// encode writes req as HTTP/1.1.
func (req RawRequest) encode() string {
	method, path := req.Method, req.Path
	if method == "" {
		method = "GET"
	}
	if path == "" {
		path = "/"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", method, path)
	for k, vs := range req.Header {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if req.ContentLength > 0 {
		b.WriteString("Content-Length: " + strconv.Itoa(req.ContentLength) + "\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(req.Body)
	return b.String()
}
