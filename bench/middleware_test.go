package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	chimw "github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/gofiber/fiber/v2"
	fiberlimiter "github.com/gofiber/fiber/v2/middleware/limiter"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/require"
	"github.com/ulule/limiter/v3"
	mgin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	mstdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	umemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	echolimit "github.com/apigate/ratelimit/adapters/echo"
	fiberlimit "github.com/apigate/ratelimit/adapters/fiber"
	ginlimit "github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
)

// The request every middleware case serves: one client, one route with a
// parameter.
const (
	benchPeer  = "203.0.113.7:51234"
	benchRoute = "/users/42"
)

// app serves the benchmark request: serve once and return the status;
// header reads a header of the last response.
type app struct {
	serve  func() int
	header func(name string) string
}

// mwContender builds one framework's app, with a limiter or without
// (bare), and returns what serves the request.
type mwContender struct {
	framework, name string
	build           func(tb testing.TB) app
}

// ourFlow is an httplimit.Flow over a new memstore, token bucket, the
// never-reached policy: what our adapters are given.
func ourFlow(tb testing.TB, opts ...httplimit.Option) *httplimit.Flow {
	tb.Helper()
	st, err := memstore.New()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	f, err := httplimit.New(st, []httplimit.Layer{{Policy: core.Policy{Name: "bench", Algorithm: core.TokenBucket, Limit: memNeverLimit, Window: window}}}, opts...)
	require.NoError(tb, err)
	return f
}

// httprateByIP is go-chi/httprate keyed by the socket peer, limit per
// window, as its docs say since LimitByIP was deprecated: chi's
// ClientIPFromRemoteAddr, then LimitBy on the canonical IP.
func httprateByIP(limit int) func(http.Handler) http.Handler {
	mw := httprate.LimitBy(limit, window, func(r *http.Request) (string, error) {
		return httprate.CanonicalizeIP(chimw.GetClientIP(r.Context())), nil
	})
	return func(next http.Handler) http.Handler { return chimw.ClientIPFromRemoteAddr(mw(next)) }
}

// threeHeaders is the headers.Config of ours-3h: X-RateLimit-* (and
// Retry-After on a denial) only, the three fields most peers write.
var threeHeaders = headers.Config{XRateLimit: true, RetryAfter: true}

// noHeaders is the headers.Config of ours-0h: no rate-limit field at all,
// to set our decision beside a peer's, whatever fields either writes.
var noHeaders = headers.Config{}

// ululeLimiter is ulule/limiter over its memory store, the never-reached
// policy.
func ululeLimiter() *limiter.Limiter {
	return limiter.New(umemory.NewStore(), limiter.Rate{Period: window, Limit: memNeverLimit})
}

// floorFields are the six rate-limit fields ours writes, with constant
// values: what the floor middlewares add to a peer.
var floorFields = [6][2]string{
	{"X-RateLimit-Limit", "1000000000"}, {"X-RateLimit-Remaining", "999999999"}, {"X-RateLimit-Reset", "1796000000"},
	{"RateLimit-Limit", "1000000000"}, {"RateLimit-Remaining", "999999999"}, {"RateLimit-Reset", "1"},
}

// floorMap returns a function that sets, in a response's header map, the
// fields of floorFields from index from on (0: all six; 3: the RateLimit-*
// ones, for a peer that writes X-RateLimit-* itself): a peer's limiter
// followed by it writes the six fields ours writes, at the least cost there
// can be (constant text, value slices made once and shared by every
// response, which no real limiter may do). It is a floor, not a contender:
// what the peer would cost if it told clients what ours does. The floors
// call it from the route's handler: one more middleware would cost its
// framework's dispatch, and in Echo a closure (an allocation) a request,
// which ours does not.
func floorMap(from int) func(http.ResponseWriter) {
	vals := make([][]string, len(floorFields))
	for i, f := range floorFields {
		vals[i] = []string{f[1]}
	}
	return func(w http.ResponseWriter) {
		h := w.Header()
		for i := from; i < len(floorFields); i++ {
			h[floorFields[i][0]] = vals[i]
		}
	}
}

var mwContenders = []mwContender{
	{"echo", "bare", func(tb testing.TB) app { return echoApp(nil) }},
	{"echo", "ours", func(tb testing.TB) app { return echoApp(echolimit.New(ourFlow(tb))) }},
	{"echo", "ours-3h", func(tb testing.TB) app {
		return echoApp(echolimit.New(ourFlow(tb, httplimit.WithHeaders(threeHeaders))))
	}},
	{"echo", "ours-0h", func(tb testing.TB) app {
		return echoApp(echolimit.New(ourFlow(tb, httplimit.WithHeaders(noHeaders))))
	}},
	{"echo", "peer", func(tb testing.TB) app {
		// Echo's own middleware.RateLimiter over its memory store
		// (x/time/rate per identifier, ctx.RealIP()).
		st := echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{
			Rate: rate.Limit(float64(memNeverLimit) / window.Seconds()), Burst: memNeverLimit,
		})
		return echoApp(echomw.RateLimiter(st))
	}},
	{"echo", "peer-6h", func(tb testing.TB) app {
		// The peer, then the six fields (it writes none): the floor.
		st := echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{
			Rate: rate.Limit(float64(memNeverLimit) / window.Seconds()), Burst: memNeverLimit,
		})
		return serveHTTP(echoHandler(echomw.RateLimiter(st), floorMap(0)))
	}},

	{"fiber", "bare", func(tb testing.TB) app { return fiberApp(tb, nil) }},
	{"fiber", "ours", func(tb testing.TB) app { return fiberApp(tb, fiberlimit.New(ourFlow(tb))) }},
	{"fiber", "ours-3h", func(tb testing.TB) app {
		return fiberApp(tb, fiberlimit.New(ourFlow(tb, httplimit.WithHeaders(threeHeaders))))
	}},
	{"fiber", "ours-0h", func(tb testing.TB) app {
		return fiberApp(tb, fiberlimit.New(ourFlow(tb, httplimit.WithHeaders(noHeaders))))
	}},
	{"fiber", "peer", func(tb testing.TB) app {
		// Fiber's own middleware/limiter: fixed window, memory storage,
		// c.IP().
		return fiberApp(tb, fiberlimiter.New(fiberlimiter.Config{Max: memNeverLimit, Expiration: window}))
	}},
	{"fiber", "peer-6h", func(tb testing.TB) app {
		// The peer, then the three RateLimit-* fields it does not write:
		// the floor.
		var kv [3][2][]byte
		for i, f := range floorFields[3:] {
			kv[i] = [2][]byte{[]byte(f[0]), []byte(f[1])}
		}
		return fiberHandlerApp(tb, fiberlimiter.New(fiberlimiter.Config{Max: memNeverLimit, Expiration: window}), func(c *fiber.Ctx) {
			for _, f := range kv {
				c.Response().Header.SetCanonical(f[0], f[1])
			}
		})
	}},

	{"chi", "bare", func(tb testing.TB) app { return chiApp(nil) }},
	{"chi", "ours", func(tb testing.TB) app { return chiApp(chilimit.New(ourFlow(tb))) }},
	{"chi", "ours-3h", func(tb testing.TB) app {
		return chiApp(chilimit.New(ourFlow(tb, httplimit.WithHeaders(threeHeaders))))
	}},
	{"chi", "ours-0h", func(tb testing.TB) app {
		return chiApp(chilimit.New(ourFlow(tb, httplimit.WithHeaders(noHeaders))))
	}},
	{"chi", "peer", func(tb testing.TB) app {
		return chiApp(httprateByIP(memNeverLimit))
	}},
	{"chi", "peer-6h", func(tb testing.TB) app {
		// The peer, then the three RateLimit-* fields it does not write:
		// the floor.
		return serveHTTP(chiHandler(httprateByIP(memNeverLimit), floorMap(3)))
	}},
	{"chi", "ulule", func(tb testing.TB) app {
		// ulule/limiter's net/http middleware.
		return chiApp(mstdlib.NewMiddleware(ululeLimiter()).Handler)
	}},

	{"gin", "bare", func(tb testing.TB) app { return ginApp(nil) }},
	{"gin", "ours", func(tb testing.TB) app { return ginApp(ginlimit.New(ourFlow(tb))) }},
	{"gin", "ours-3h", func(tb testing.TB) app {
		return ginApp(ginlimit.New(ourFlow(tb, httplimit.WithHeaders(threeHeaders))))
	}},
	{"gin", "ours-0h", func(tb testing.TB) app {
		return ginApp(ginlimit.New(ourFlow(tb, httplimit.WithHeaders(noHeaders))))
	}},
	{"gin", "peer", func(tb testing.TB) app {
		// ulule/limiter's Gin middleware (Gin has no limiter of its own).
		return ginApp(mgin.NewMiddleware(ululeLimiter()))
	}},
	{"gin", "peer-6h", func(tb testing.TB) app {
		// The peer, then the three RateLimit-* fields it does not write:
		// the floor.
		return serveHTTP(ginHandler(mgin.NewMiddleware(ululeLimiter()), floorMap(3)))
	}},
}

// BenchmarkMiddleware serves one request, again and again, through each
// framework's own entry point (ServeHTTP, or fasthttp's handler for Fiber)
// from one goroutine, one client IP, a memory store and a limit never
// reached: the cost of the middleware in the framework, next to the
// framework alone (bare).
func BenchmarkMiddleware(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	for _, c := range mwContenders {
		b.Run(c.framework+"/"+c.name, func(b *testing.B) {
			serve := c.build(b).serve
			run(b, 1, 1, true, func(int) (bool, error) { return serve() == http.StatusOK, nil })
		})
	}
}

// TestMiddlewareContenders checks that each app answers 200 and that
// every limiter is in the path: each writes X-RateLimit-Remaining, but for
// Echo's, which writes no header, and is seen to deny once its burst is
// spent.
func TestMiddlewareContenders(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	for _, c := range mwContenders {
		t.Run(c.framework+"/"+c.name, func(t *testing.T) {
			a := c.build(t)
			require.Equal(t, http.StatusOK, a.serve())
			require.Equal(t, http.StatusOK, a.serve())
			switch {
			case c.name == "bare" || c.name == "ours-0h":
				require.Empty(t, a.header("X-RateLimit-Remaining"))
			case c.framework == "echo" && c.name == "peer":
				require.Empty(t, a.header("X-RateLimit-Remaining"))
			default:
				require.NotEmpty(t, a.header("X-RateLimit-Remaining"))
			}
		})
	}
	e := echoApp(echomw.RateLimiter(echomw.NewRateLimiterMemoryStoreWithConfig(echomw.RateLimiterMemoryStoreConfig{Rate: 1e-9, Burst: 1})))
	require.Equal(t, http.StatusOK, e.serve())
	require.Equal(t, http.StatusTooManyRequests, e.serve(), "echo/peer")
}

// recorder is a ResponseWriter that keeps the status and the header map
// (cleared before each request) and discards the body, so that the
// benchmarks measure the framework and the limiter, not the recorder. Every
// net/http contender is served into the same kind.
type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header { return r.h }

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return len(p), nil
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

// serveHTTP returns what serves the benchmark request, reused, into a
// reused recorder.
func serveHTTP(h http.Handler) app {
	req := httptest.NewRequest(http.MethodGet, benchRoute, nil)
	req.RemoteAddr = benchPeer
	w := &recorder{h: http.Header{}}
	return app{
		serve: func() int {
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code == 0 {
				return http.StatusOK
			}
			return w.code
		},
		header: func(name string) string {
			// Case-insensitively: a field set under the standards'
			// spelling (X-RateLimit-Limit) is not where Header.Get looks.
			for k, v := range w.h {
				if strings.EqualFold(k, name) && len(v) > 0 {
					return v[0]
				}
			}
			return ""
		},
	}
}

// echoHandler is an Echo app with mw, if not nil; its route's handler
// calls pre, if not nil, first.
func echoHandler(mw echo.MiddlewareFunc, pre func(http.ResponseWriter)) http.Handler {
	e := echo.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/users/:id", func(c echo.Context) error {
		if pre != nil {
			pre(c.Response())
		}
		return c.NoContent(http.StatusOK)
	})
	return e
}

func echoApp(mw echo.MiddlewareFunc) app { return serveHTTP(echoHandler(mw, nil)) }

// chiHandler is a chi app with mw, if not nil; its route's handler calls
// pre, if not nil, first.
func chiHandler(mw func(http.Handler) http.Handler, pre func(http.ResponseWriter)) http.Handler {
	r := chi.NewRouter()
	if mw != nil {
		r.Use(mw)
	}
	r.Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) {
		if pre != nil {
			pre(w)
		}
		w.WriteHeader(http.StatusOK)
	})
	return r
}

func chiApp(mw func(http.Handler) http.Handler) app { return serveHTTP(chiHandler(mw, nil)) }

// ginHandler is a Gin app with mw, if not nil; its route's handler calls
// pre, if not nil, first.
func ginHandler(mw gin.HandlerFunc, pre func(http.ResponseWriter)) http.Handler {
	e := gin.New()
	if mw != nil {
		e.Use(mw)
	}
	e.GET("/users/:id", func(c *gin.Context) {
		if pre != nil {
			pre(c.Writer)
		}
		c.Status(http.StatusOK)
	})
	return e
}

func ginApp(mw gin.HandlerFunc) app { return serveHTTP(ginHandler(mw, nil)) }

// fiberApp serves through the app's fasthttp handler with a reused
// RequestCtx, as Fiber's own benchmarks do (app.Test goes through a
// connection and costs far more than the limiter).
func fiberApp(tb testing.TB, mw fiber.Handler) app { return fiberHandlerApp(tb, mw, nil) }

// fiberHandlerApp is fiberApp whose route's handler calls pre, if not nil,
// first.
func fiberHandlerApp(tb testing.TB, mw fiber.Handler, pre func(*fiber.Ctx)) app {
	tb.Helper()
	f := fiber.New(fiber.Config{DisableStartupMessage: true})
	if mw != nil {
		f.Use(mw)
	}
	f.Get("/users/:id", func(c *fiber.Ctx) error {
		if pre != nil {
			pre(c)
		}
		return c.SendStatus(fiber.StatusOK)
	})
	h := f.Handler()
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodGet)
	req.SetRequestURI(benchRoute)
	ap, err := netip.ParseAddrPort(benchPeer)
	require.NoError(tb, err)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, net.TCPAddrFromAddrPort(ap), nil)
	return app{
		serve: func() int {
			ctx.Response.Reset()
			h(&ctx)
			return ctx.Response.StatusCode()
		},
		header: func(name string) string {
			var v string
			ctx.Response.Header.VisitAll(func(k, val []byte) {
				if strings.EqualFold(string(k), name) {
					v = string(val)
				}
			})
			return v
		},
	}
}
