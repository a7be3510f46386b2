package ginlimit_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

type harness struct {
	adapterstest.HTTPHarness[harness]
}

func (harness) Pattern(p string) string { return p }
func (harness) UseSeesRoute() bool      { return true }

// Handler is the app of spec: gin.New, without Recovery.
func (harness) Handler(spec *adapterstest.Spec) http.Handler {
	e := gin.New()
	if auth := spec.Authenticate; auth != nil {
		e.Use(func(c *gin.Context) {
			c.Request = c.Request.WithContext(auth(c.Request.Context(), c.GetHeader))
		})
	}
	e.Use(adapterstest.Middlewares(spec.Global, ginlimit.New)...)
	for _, r := range spec.Routes {
		hs := append(adapterstest.Middlewares(r.Limits, ginlimit.New), func(c *gin.Context) {
			c.String(spec.Answer(c.Request.Context(), c.GetHeader), adapterstest.Body)
		})
		e.Handle(r.Method, r.Path, hs...)
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
