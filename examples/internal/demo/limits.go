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
//	POST /login              Policies.Login, per client IP: a brute-force
//	                         guard, its lockout cleared by a right password
//	GET  /api/data           Policies.API, per API key (the X-API-Key header)
//	GET  /users/{id}         Policies.Users, per route and client IP:
//	GET  /users/{id}/posts   one limiter, a quota for each route
//	GET  /                   the global limit only
//	GET  /metrics            no limit: Limiters.Metrics, for Prometheus
//
// With DENY_FILE set, every request but GET /metrics is also checked
// against the deny list in that file, kept in step with it (Limiters.Guard).
package demo

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// APIKeyHeader is the request header that identifies API clients.
const APIKeyHeader = "X-API-Key"

// Policies are the limits of the demo API.
type Policies struct {
	// Global applies to every request, 404s included, per client IP.
	Global core.Policy
	// Login applies to POST /login, per client IP, on top of Global. Its
	// Lockout makes it a brute-force guard; a right password clears the
	// client's strikes (Limiters.Authenticate).
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
		// The 6th locks the client out for 30 minutes, every request
		// refused; each later offence remembered doubles it, up to a day.
		Login: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
			Lockout: &core.Lockout{Duration: 30 * time.Minute, Max: 24 * time.Hour}},
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

	// Guard holds the options that the Global mount adds to its own: the
	// deny list of DENY_FILE (httplimit.WithDenyList) when it is set,
	// nothing otherwise. Every adapter re-exports httplimit's options, so
	// each example appends Guard to its Global options, as they are. The
	// Global mount skips GET MetricsPath before any list is consulted: a
	// deny-listed address can still be scraped from.
	Guard []httplimit.Option

	// Metrics serves, in the Prometheus text format, what the four
	// limiters decided (promlimit's series, labeled limit="global",
	// "login", "api" and "users"), the memory store's key count, and the
	// Go runtime's and the process's metrics. Examples mount it at GET
	// MetricsPath, which Global skips (SkipMetrics).
	Metrics http.Handler

	// clientIP is the adapters' default key: "ip:" and the socket peer.
	clientIP *keyfuncs.ClientIP
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
	if l.clientIP, err = keyfuncs.NewClientIP(); err != nil {
		return Limiters{}, fmt.Errorf("client IP: %w", err)
	}
	return l, nil
}

// DemoPassword is the only password POST /login accepts, as the form
// field PasswordField: curl -d password=demo.
const DemoPassword = "demo"

// PasswordField is the form field of POST /login that holds the password,
// in an application/x-www-form-urlencoded body.
const PasswordField = "password"

// Authenticate is the body of every example's POST /login handler, which
// runs once the login limiter has admitted the attempt: remoteAddr is the
// socket peer ("203.0.113.7:4321", as http.Request.RemoteAddr), password
// the form's PasswordField. It returns the status and the JSON body to
// answer with:
//
//   - a wrong password: 401 {"error":"invalid_credentials",...}; the
//     attempt stays counted against the login limit;
//   - DemoPassword: the client's strikes are cleared (ClearLoginStrikes),
//     as a real login does after a success, and 200 {"message":"logged in"};
//     503 {"error":"unavailable",...} if the store could not clear them.
//
// A locked-out client never gets here: the limiter answers 429 before the
// handler runs, right password or not.
func (l Limiters) Authenticate(ctx context.Context, remoteAddr, password string) (int, map[string]string) {
	if subtle.ConstantTimeCompare([]byte(password), []byte(DemoPassword)) != 1 {
		return http.StatusUnauthorized, map[string]string{"error": "invalid_credentials", "message": "Wrong password."}
	}
	if err := l.ClearLoginStrikes(ctx, remoteAddr); err != nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "unavailable", "message": "Try again later."}
	}
	return http.StatusOK, map[string]string{"message": "logged in"}
}

// ClearLoginStrikes forgets what the login limiter holds for the client at
// remoteAddr ("203.0.113.7:4321", "[2001:db8::1]:443"): its attempts, its
// strikes and any lockout (Limiter.Reset). The key is the one the login
// mount computes, the adapters' default: "ip:" and the socket peer, an
// IPv6 address grouped by its /56, no proxy header believed. An address
// that is no IP is an error wrapping keyfuncs.ErrNoKey.
func (l Limiters) ClearLoginStrikes(ctx context.Context, remoteAddr string) error {
	if l.clientIP == nil || l.Login == nil {
		return fmt.Errorf("demo: ClearLoginStrikes on Limiters not built by NewLimiters")
	}
	key, err := l.clientIP.Key(peer(remoteAddr))
	if err != nil {
		return err
	}
	return l.Login.Reset(ctx, key)
}

// peer is a keyfuncs.Request that has nothing but its socket peer.
type peer string

func (p peer) RemoteAddr() string         { return string(p) }
func (peer) Header(string) string         { return "" }
func (peer) HeaderValues(string) []string { return nil }
func (peer) Query(string) string          { return "" }
func (peer) Method() string               { return http.MethodPost }
func (peer) Route() string                { return "" }
func (peer) Context() context.Context     { return context.Background() }

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
