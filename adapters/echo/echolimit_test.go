package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/apigate/ratelimit/adapters/echo"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

type harness struct {
	adapterstest.HTTPHarness[harness]
}

func (harness) Pattern(p string) string { return p }
func (harness) UseSeesRoute() bool      { return true }

// Handler is the app of spec: echo.New, without the Recover middleware.
func (harness) Handler(spec *adapterstest.Spec) http.Handler {
	e := echo.New()
	if auth := spec.Authenticate; auth != nil {
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				r := c.Request()
				c.SetRequest(r.WithContext(auth(r.Context(), r.Header.Get)))
				return next(c)
			}
		})
	}
	e.Use(adapterstest.Middlewares(spec.Global, echolimit.New)...)
	for _, r := range spec.Routes {
		e.Add(r.Method, r.Path, func(c echo.Context) error {
			r := c.Request()
			return c.String(spec.Answer(r.Context(), r.Header.Get), adapterstest.Body)
		}, adapterstest.Middlewares(r.Limits, echolimit.New)...)
	}
	return e
}

func TestSuite(t *testing.T) { adapterstest.Run(t, harness{}) }

// TestSockets runs the disconnect attack over real sockets, on one
// redis-server for the whole run.
func TestSockets(t *testing.T) { adapterstest.RunDisconnects(t, harness{}, redistest.Start(t)) }

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

func TestPanics(t *testing.T) { adapterstest.RunPanics(t, harness{}) }
