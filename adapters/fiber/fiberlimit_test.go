package fiberlimit_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

type harness struct{}

func (harness) Pattern(p string) string { return p }
func (harness) UseSeesRoute() bool      { return false }

func (harness) CancelsOnDisconnect() bool { return false }

func (h harness) Build(_ testing.TB, spec *adapterstest.Spec) adapterstest.App {
	return newApp(h.setup(spec))
}

// Serve serves the app of spec with Fiber's own server, app.Listener, on
// a loopback port; the app has no recover middleware.
func (h harness) Serve(t testing.TB, spec *adapterstest.Spec) string {
	return newApp(h.setup(spec)).listen(t)
}

// setup registers the app of spec.
func (harness) setup(spec *adapterstest.Spec) func(f *fiber.App) {
	return func(f *fiber.App) {
		if auth := spec.Authenticate; auth != nil {
			f.Use(func(c *fiber.Ctx) error {
				c.SetUserContext(auth(c.UserContext(), func(k string) string { return c.Get(k) }))
				return c.Next()
			})
		}
		for _, m := range spec.Global {
			f.Use(fiberlimit.New(m.Flow))
		}
		for _, r := range spec.Routes {
			hs := append(adapterstest.Middlewares(r.Limits, fiberlimit.New), func(c *fiber.Ctx) error {
				status := spec.Answer(c.UserContext(), func(k string) string { return c.Get(k) })
				return c.Status(status).SendString(adapterstest.Body)
			})
			f.Add(r.Method, r.Path, hs...)
		}
	}
}

// app is a Fiber app as an adapterstest.App.
type app struct {
	fiber *fiber.App
	mu    sync.Mutex
	ctx   context.Context
}

// newApp returns an app whose handlers are registered by setup, after one
// that makes the suite's request context the user context, the one
// fiberlimit hands to key functions and waits on.
func newApp(setup func(f *fiber.App)) *app {
	a := &app{fiber: fiber.New(fiber.Config{DisableStartupMessage: true})}
	a.fiber.Use(func(c *fiber.Ctx) error {
		if ctx := a.context(); ctx != nil {
			c.SetUserContext(ctx)
		}
		return c.Next()
	})
	setup(a.fiber)
	a.fiber.Handler() // builds the route tree, as app.Listen and app.Test do
	return a
}

// listen serves the app on a free loopback port until the test ends and
// returns the address.
func (a *app) listen(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.fiber.Listener(ln) }()
	t.Cleanup(func() {
		assert.NoError(t, a.fiber.ShutdownWithTimeout(10*time.Second), "shutdown")
		assert.NoError(t, <-done, "serve")
	})
	return ln.Addr().String()
}

func (a *app) context() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctx
}

// Do serves req on a connection whose peer is req.RemoteAddr, through
// fasthttp's own ServeConn, as app.Test does with a fixed peer.
func (a *app) Do(t testing.TB, req adapterstest.Request) adapterstest.Response {
	r := httptest.NewRequest(req.Method, req.Path, nil)
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	dump, err := httputil.DumpRequest(r, true)
	require.NoError(t, err)
	c := &conn{remote: tcpAddr(t, req.RemoteAddr)}
	c.in.Write(dump)

	a.mu.Lock()
	a.ctx = req.Context
	a.mu.Unlock()
	assert.NoError(t, a.fiber.Server().ServeConn(c), "ServeConn")
	res, err := http.ReadResponse(bufio.NewReader(&c.out), r)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return adapterstest.Response{Status: res.StatusCode, Header: res.Header, Body: string(body)}
}

func tcpAddr(t testing.TB, s string) *net.TCPAddr {
	ap, err := netip.ParseAddrPort(s)
	require.NoError(t, err)
	return net.TCPAddrFromAddrPort(ap)
}

// conn is an in-memory connection with a chosen peer address.
type conn struct {
	in, out bytes.Buffer
	remote  net.Addr
}

func (c *conn) Read(b []byte) (int, error)       { return c.in.Read(b) }
func (c *conn) Write(b []byte) (int, error)      { return c.out.Write(b) }
func (c *conn) Close() error                     { return nil }
func (c *conn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (c *conn) RemoteAddr() net.Addr             { return c.remote }
func (c *conn) SetDeadline(time.Time) error      { return nil }
func (c *conn) SetReadDeadline(time.Time) error  { return nil }
func (c *conn) SetWriteDeadline(time.Time) error { return nil }

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }

// TestSockets runs the disconnect attack and the zero-copy key check over
// real sockets, on one redis-server for the whole run.
func TestSockets(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("Disconnects", func(t *testing.T) { adapterstest.RunDisconnects(t, harness{}, srv) })
	t.Run("ZeroCopyKeys", func(t *testing.T) { testZeroCopyKeys(t, srv) })
}

// TestLockout checks brute-force lockouts over real sockets, on memory
// and on Redis with two app servers.
func TestLockout(t *testing.T) { adapterstest.RunLockout(t, harness{}, redistest.Start(t)) }

// TestShadow checks shadow mode over real sockets.
func TestShadow(t *testing.T) { adapterstest.RunShadow(t, harness{}) }

// TestProblemDetails checks problem details (httplimit.WithProblemDetails)
// over real sockets.
func TestProblemDetails(t *testing.T) { adapterstest.RunProblemDetails(t, harness{}) }

// TestQuota checks the quota endpoint (httplimit.WithQuota) over real
// sockets, on memory and on Redis with two app servers.
func TestQuota(t *testing.T) { adapterstest.RunQuota(t, harness{}, redistest.Start(t)) }

// TestSettle checks layers that count by the response over real
// sockets, on memory and on Redis with two app servers.
func TestSettle(t *testing.T) { adapterstest.RunSettle(t, harness{}, redistest.Start(t)) }

// TestReputation checks reputations over real sockets, on memory and on
// Redis with two app servers.
func TestReputation(t *testing.T) { adapterstest.RunReputation(t, harness{}, redistest.Start(t)) }

// TestBans checks bans over real sockets: in process, and through Redis
// between two app servers.
func TestBans(t *testing.T) { adapterstest.RunBans(t, harness{}, redistest.Start(t)) }

// TestSpelling checks the rate-limit field names on the wire.
func TestSpelling(t *testing.T) { adapterstest.RunSpelling(t, harness{}) }

// TestAccess checks allow and deny lists over real sockets, forged
// forwarding headers included.
func TestAccess(t *testing.T) { adapterstest.RunAccess(t, harness{}) }

// TestPanics runs with Fiber's default config, without its recover
// middleware: an escaped panic would end the test binary.
func TestPanics(t *testing.T) { adapterstest.RunPanics(t, harness{}) }
