package client_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/gofiber/fiber/v2"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	echolimit "github.com/apigate/ratelimit/adapters/echo"
	fiberlimit "github.com/apigate/ratelimit/adapters/fiber"
	ginlimit "github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/client"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// tenPerSecond is the limit of the framework tests: a token bucket of 10
// refilled at 10 per second. 50 requests sent back to back pass as 10 at
// once and then one every 100ms: the last one is admitted 4 s after the
// first, which is the ideal.
var tenPerSecond = core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 10}

func newFlow(t *testing.T) *httplimit.Flow {
	t.Helper()
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	f, err := httplimit.New(store, []httplimit.Layer{{Policy: tenPerSecond}})
	require.NoError(t, err)
	return f
}

// counted wraps a base transport and counts what reaches the server, and
// the 429s it answered.
type counted struct {
	base     http.RoundTripper
	sent     atomic.Int64
	refusals atomic.Int64
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	res, err := c.base.RoundTrip(r)
	if err == nil && res.StatusCode == http.StatusTooManyRequests {
		c.refusals.Add(1)
	}
	return res, err
}

// serveGin, serveEcho, serveChi and serveFiber serve one route "/" limited
// by tenPerSecond on a free port of 127.0.0.1, until the test ends.
func serveGin(t *testing.T) string {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(newFlow(t)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	return listen(t, r)
}

func serveEcho(t *testing.T) string {
	e := echo.New()
	e.Use(echolimit.New(newFlow(t)))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	return listen(t, e)
}

func serveChi(t *testing.T) string {
	r := chi.NewRouter()
	r.Use(chilimit.New(newFlow(t)))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return listen(t, r)
}

func serveFiber(t *testing.T) string {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(fiberlimit.New(newFlow(t)))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.Listener(ln) }()
	t.Cleanup(func() {
		assert.NoError(t, app.ShutdownWithTimeout(10*time.Second))
		assert.NoError(t, <-done)
	})
	return "http://" + ln.Addr().String()
}

func listen(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// TestFrameworks sends 50 requests, one after the other, through a
// Transport to each framework's middleware: all 50 are answered 200, no
// 429 reaches the caller, and the run takes within 15% of the ideal 4 s.
// With pacing, the server never has to refuse one.
func TestFrameworks(t *testing.T) {
	const requests, ideal = 50, 4 * time.Second
	for _, fw := range []struct {
		name  string
		serve func(*testing.T) string
		pace  bool
	}{
		{"gin", serveGin, false},
		{"echo", serveEcho, false},
		{"chi", serveChi, true},
		{"fiber", serveFiber, true},
	} {
		t.Run(fw.name, func(t *testing.T) {
			url := fw.serve(t)
			base := &counted{base: http.DefaultTransport.(*http.Transport).Clone()}
			t.Cleanup(base.base.(*http.Transport).CloseIdleConnections)
			var opts []client.Option
			if fw.pace {
				opts = append(opts, client.WithPacing(0))
			}
			tr, err := client.New(base, opts...)
			require.NoError(t, err)
			hc := &http.Client{Transport: tr, Timeout: testwait.D(30 * time.Second)}

			start := time.Now()
			for i := range requests {
				res, err := hc.Get(url)
				require.NoError(t, err, "request %d", i)
				_, _ = io.Copy(io.Discard, res.Body)
				require.NoError(t, res.Body.Close())
				require.Equal(t, http.StatusOK, res.StatusCode, "request %d", i)
			}
			took := time.Since(start)
			t.Logf("%s: %d requests in %v (ideal %v), %d sent, %d refused by the server, pacing %v",
				fw.name, requests, took, ideal, base.sent.Load(), base.refusals.Load(), fw.pace)
			// The client cannot beat the server's rate: no earlier than
			// the ideal, less the first window's burst rounding. The upper
			// bound is loose, for a busy machine: what must hold there is
			// that every request passed, and who was refused (below).
			assert.GreaterOrEqual(t, took.Seconds(), 0.95*ideal.Seconds(), "took %v", took)
			assert.Less(t, took, testwait.D(3*ideal), "took %v", took)
			if fw.pace {
				assert.Zero(t, base.refusals.Load(), "pacing waits for the reset instead of being refused")
			} else {
				assert.Positive(t, base.refusals.Load(), "the server refused some and the client retried them")
			}
		})
	}
}
