// Package demo is the part the example programs share: the store (memory, or
// Redis when REDIS_URL is set), the limits of the demo API, the address it
// listens on (ADDR), the banner that says how to try it, the Prometheus
// metrics of its limiters, and the lifecycle of the server, graceful
// shutdown included. Each example keeps only its framework's wiring: which
// limiter goes on which route.
//
// The demo API, the same in every framework:
//
//	every request            Policies.Global, per client IP (the socket peer)
//	POST /login              Policies.Login, per client IP
//	GET  /api/data           Policies.API, per API key (the X-API-Key header)
//	GET  /users/{id}         Policies.Users, per route and client IP:
//	GET  /users/{id}/posts   one limiter, a quota for each route
//	GET  /                   the global limit only
//	GET  /metrics            no limit: Limiters.Metrics, for Prometheus
package demo

import (
	"fmt"
	"net/http"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
)

// APIKeyHeader is the request header that identifies API clients.
const APIKeyHeader = "X-API-Key"

// Policies are the limits of the demo API.
type Policies struct {
	// Global applies to every request, 404s included, per client IP.
	Global core.Policy
	// Login applies to POST /login, per client IP, on top of Global.
	Login core.Policy
	// API applies to GET /api/data, per API key, on top of Global.
	API core.Policy
	// Users applies to GET /users/{id} and GET /users/{id}/posts, on top of
	// Global, per route and client IP: each route has a quota of its own,
	// which every id shares.
	Users core.Policy
}

// DefaultPolicies returns the limits the example programs run with.
func DefaultPolicies() Policies {
	return Policies{
		// Bursts of 20, then 100 per minute (one every 600ms).
		Global: core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20},
		// Exact: at most 5 attempts in any 15 minutes, no boundary burst.
		Login: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute},
		// O(1) memory per key, smooth across window boundaries.
		API: core.Policy{Name: "api", Algorithm: core.SlidingWindowCounter, Limit: 1000, Window: time.Hour},
		// The cheapest: one counter per key and minute.
		Users: core.Policy{Name: "users", Algorithm: core.FixedWindow, Limit: 30, Window: time.Minute},
	}
}

// Limiters are the limiters of the demo API, one per policy, sharing one
// store, and the key functions of those not keyed by client IP. Examples
// mount Global on every request and each other one on its route; tests
// build them with small limits.
type Limiters struct {
	Global *core.Limiter // every request; default key: client IP
	Login  *core.Limiter // POST /login; default key: client IP
	API    *core.Limiter // GET /api/data; key: APIKey
	Users  *core.Limiter // GET /users/{id} and /users/{id}/posts; key: RouteAndIP

	// APIKey is the key function of the API limit: the hashed value of the
	// X-API-Key header. A request without one is refused by the middleware
	// with 400 and {"error":"rate_limit_key_missing",...}; the key is not
	// checked, which is the job of authentication, running before the
	// limiter in a real API.
	APIKey keyfuncs.Func
	// RouteAndIP is the key function of the users limit: one bucket per
	// route pattern and client IP, so that one limiter mounted on several
	// routes gives each its own quota, and /users/1 and /users/2 share one.
	RouteAndIP keyfuncs.Func

	// Metrics serves, in the Prometheus text format, what the four
	// limiters decided (promlimit's series, labeled limit="global",
	// "login", "api" and "users"), the memory store's key count, and the
	// Go runtime's and the process's metrics. Examples mount it at GET
	// MetricsPath, which Global skips (SkipMetrics).
	Metrics http.Handler
}

// NewLimiters returns the limiters of p over store, each built with opts
// and observed by one promlimit.Metrics, which Limiters.Metrics serves.
// The login limiter also fails closed: were the store to fail, a login form
// left open to unlimited guessing is worse than a login answering 503 for
// a while. The others fail open, the core's default.
func NewLimiters(store core.Store, p Policies, opts ...core.Option) (Limiters, error) {
	var l Limiters
	metrics, handler, err := newMetrics(store)
	if err != nil {
		return Limiters{}, fmt.Errorf("metrics: %w", err)
	}
	l.Metrics = handler
	opts = append([]core.Option{core.WithObserver(metrics)}, opts...)
	if l.Global, err = core.NewLimiter(store, p.Global, opts...); err != nil {
		return Limiters{}, fmt.Errorf("global limit: %w", err)
	}
	loginOpts := append([]core.Option{core.WithFailMode(core.FailClosed)}, opts...)
	if l.Login, err = core.NewLimiter(store, p.Login, loginOpts...); err != nil {
		return Limiters{}, fmt.Errorf("login limit: %w", err)
	}
	if l.API, err = core.NewLimiter(store, p.API, opts...); err != nil {
		return Limiters{}, fmt.Errorf("API limit: %w", err)
	}
	if l.Users, err = core.NewLimiter(store, p.Users, opts...); err != nil {
		return Limiters{}, fmt.Errorf("users limit: %w", err)
	}
	if l.APIKey, err = keyfuncs.APIKeyHeader(APIKeyHeader); err != nil {
		return Limiters{}, fmt.Errorf("API key: %w", err)
	}
	if l.RouteAndIP, err = routeAndIP(); err != nil {
		return Limiters{}, fmt.Errorf("users key: %w", err)
	}
	return l, nil
}

// routeAndIP returns the key function of Limiters.RouteAndIP. keyfuncs.IP
// with no option is the adapters' default: the socket peer, no proxy
// header believed.
func routeAndIP() (keyfuncs.Func, error) {
	ip, err := keyfuncs.IP()
	if err != nil {
		return nil, err
	}
	return keyfuncs.Compose(keyfuncs.Route(), ip)
}
