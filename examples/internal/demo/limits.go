// Package demo is the part the example programs share: the store (memory, or
// Redis when REDIS_URL is set), the limits of the demo API, the address it
// listens on (ADDR), the banner that says how to try it, the Prometheus
// metrics of its limiter, and the lifecycle of the server, graceful
// shutdown included. Each example keeps only its framework's wiring: one
// layered limiter mounted on every request, and the routes.
//
// The demo API, the same in every framework, each request checked against
// every layer that applies to it, all or nothing:
//
//	every request            layer "global": Policies.Global, per client IP (the socket peer)
//	POST /login              and layer "login": Policies.Login, per client IP, a brute-force
//	                         guard, its lockout cleared by a right password
//	GET  /api/data           and layer "api": Policies.API, per API key (the X-API-Key header)
//	GET  /users/{id}         and layer "users": Policies.Users, per client IP
//	GET  /users/{id}/posts   and layer "posts": Policies.Users, per client IP, a quota of its own
//	GET  /                   the global layer only
//	GET  /metrics            no limit: Limiters.Metrics, for Prometheus
//
// With DENY_FILE set, every request but GET /metrics is also checked
// against the deny list in that file, kept in step with it (Limiters.Guard).
package demo

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
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
	// Users applies to GET /users/{id} (layer "users") and, as layer
	// "posts", to GET /users/{id}/posts, on top of Global, per client IP:
	// each route has a quota of its own, which every id shares.
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
		// While the store is down it fails closed (503, retry after 5 s):
		// a password guard must not open in an outage.
		Login: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
			Lockout: 30 * time.Minute, LockoutMax: 24 * time.Hour, FailClosed: 5 * time.Second},
		// O(1) memory per key, smooth across window boundaries.
		API: core.Policy{Name: "api", Algorithm: core.SlidingWindowCounter, Limit: 1000, Window: time.Hour},
		// The cheapest: one counter per key and minute.
		Users: core.Policy{Name: "users", Algorithm: core.FixedWindow, Limit: 30, Window: time.Minute},
	}
}

// Limiters are the limits of the demo API: one layered Limiter over one
// store, whose layers (Layers) say which requests each limit applies to and
// who the client is under it. Examples mount it once, on every request:
//
//	flow, err := l.Flow(httplimit.WithSkip(demo.SkipMetrics))
//	r.Use(ginlimit.New(flow))
//
// A request passes only when every layer that applies admits it, and one
// denied by any layer (a sixth login attempt) takes nothing from the others
// (the global quota). Tests build it with small limits.
type Limiters struct {
	// Limiter decides every request against the layers, in one store
	// call: the global limit per client IP on every request, the login
	// guard on POST /login, the API key's quota on GET /api/data, and the
	// users' on GET /users/{id} and GET /users/{id}/posts (one layer each,
	// so that each route has a quota of its own, which every id shares).
	// It is the Limiter of the Flow that Flow builds, nil until then.
	Limiter *core.Limiter
	// Layers are the layers of the Flow: their policies, routes and key
	// functions.
	Layers []httplimit.Layer

	// Guard holds the options that Flow adds: the deny list of
	// DENY_FILE (httplimit.WithDenyList) when it is set, nothing
	// otherwise. GET MetricsPath is skipped before any list is consulted:
	// a deny-listed address can still be scraped from.
	Guard []httplimit.Option

	// Metrics serves, in the Prometheus text format, what the limiter
	// decided (promlimit's series: each request counted under every layer
	// that applied to it, labeled limit= "global", "login", "api", "users"
	// or "posts"), the memory store's key count, and the Go runtime's and the
	// process's metrics. Examples mount it at GET MetricsPath, which their
	// Flow skips (SkipMetrics).
	Metrics http.Handler

	store core.Store    // the Flow's
	core  []core.Option // the Flow's Limiter's
	// rep scores clients in shadow mode (package reputation): it logs
	// whom it would ban and its metrics count them, but it bans and
	// scales no one, as a team trying one would start.
	rep *reputation.Tracker

	// clientIP is the adapters' default key: "ip:" and the socket peer.
	clientIP *keyfuncs.ClientIP
}

// Flow returns the Flow every example mounts, after opts, its own skip
// of GET MetricsPath: Layers over the store, the client address the deny
// list matches (the socket peer, as the layers' keys see it), the quota
// endpoint at GET QuotaPath, then Guard.
// It sets l.Limiter to the Flow's Limiter, for Authenticate. Call it once:
// Metrics counts one Limiter.
func (l *Limiters) Flow(opts ...httplimit.Option) (*httplimit.Flow, error) {
	if l.store == nil {
		return nil, errors.New("demo: Flow of Limiters not built by NewLimiters")
	}
	opts = append(append(opts, httplimit.WithCore(l.core...), httplimit.WithClientIP(l.clientIP), httplimit.WithQuota(QuotaPath),
		httplimit.WithReputation(l.rep)), l.Guard...)
	f, err := httplimit.New(l.store, l.Layers, opts...)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	l.Limiter = f.Limiter()
	return f, nil
}

// NewLimiters returns the layers of p over store, for a Flow whose Limiter
// is built with opts and observed by one promlimit.Metrics, which
// Limiters.Metrics serves. The
// login layer fails closed: were the store to fail, a login form left open
// to unlimited guessing is worse than a login answering 503 for a while.
// The other layers fail open, the core's default.
func NewLimiters(store core.Store, p Policies, opts ...core.Option) (Limiters, error) {
	var l Limiters
	rep, err := reputation.New(reputation.Config{Shadow: true, Bands: []reputation.Band{
		{Name: "suspicious", Above: 20, Scale: 0.5}, {Name: "abusive", Above: 40, Ban: true},
	}})
	if err != nil {
		return Limiters{}, fmt.Errorf("reputation: %w", err)
	}
	l.rep = rep
	metrics, handler, err := newMetrics(store, rep)
	if err != nil {
		return Limiters{}, fmt.Errorf("metrics: %w", err)
	}
	l.Metrics = handler
	if l.clientIP, err = keyfuncs.NewClientIP(); err != nil {
		return Limiters{}, fmt.Errorf("client IP: %w", err)
	}
	apiKey, err := keyfuncs.APIKeyHeader(APIKeyHeader, nil)
	if err != nil {
		return Limiters{}, fmt.Errorf("API key: %w", err)
	}
	ip := l.clientIP.Key
	l.Layers = []httplimit.Layer{
		{Policy: p.Global, Key: ip},
		{Policy: p.Login, Key: ip, Methods: []string{http.MethodPost}, Routes: []string{"/login"}},
		// A request without X-API-Key gets 400 and
		// {"error":"rate_limit_key_missing",...}; the key is not checked,
		// which is the job of authentication, running before the limiter
		// in a real API.
		{Policy: p.API, Key: apiKey, Methods: []string{http.MethodGet}, Routes: []string{"/api/data"}},
		{Policy: p.Users, Key: ip, Methods: []string{http.MethodGet}, Routes: []string{"/users/{id}"}},
		{Policy: named(PostsLayer, p.Users), Key: ip, Methods: []string{http.MethodGet}, Routes: []string{"/users/{id}/posts"}},
	}
	for _, ly := range l.Layers { // reported here, not when an example mounts the Flow
		if err := ly.Policy.Validate(); err != nil {
			return Limiters{}, fmt.Errorf("limits: layer %q: %w", ly.Policy.Name, err)
		}
	}
	l.store = store
	l.core = append([]core.Option{core.WithObserver(metrics)}, opts...)
	return l, nil
}

// PostsLayer is the name of the layer of GET /users/{id}/posts, whose
// policy is Policies.Users with this name.
const PostsLayer = "posts"

// named is p named name, the name of its layer.
func named(name string, p core.Policy) core.Policy {
	p.Name = name
	return p
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

// LoginLayer is the name of the login layer, Policies.Login's.
const LoginLayer = "login"

// ClearLoginStrikes forgets what the login layer holds for the client at
// remoteAddr ("203.0.113.7:4321", "[2001:db8::1]:443"): its attempts, its
// strikes and any lockout (Limiter.Reset). The key is the one the login
// mount computes, the adapters' default: "ip:" and the socket peer, an
// IPv6 address grouped by its /56, no proxy header believed. An address
// that is no IP is an error wrapping keyfuncs.ErrNoKey.
func (l Limiters) ClearLoginStrikes(ctx context.Context, remoteAddr string) error {
	if l.clientIP == nil || l.Limiter == nil {
		return fmt.Errorf("demo: ClearLoginStrikes on Limiters not built by NewLimiters")
	}
	key, err := l.clientIP.Key(peer(remoteAddr))
	if err != nil {
		return err
	}
	return l.Limiter.Reset(ctx, key, LoginLayer)
}

// peer is a keyfuncs.Request that has nothing but its socket peer.
type peer string

func (p peer) RemoteAddr() string         { return string(p) }
func (peer) Header(string) string         { return "" }
func (peer) HeaderValues(string) []string { return nil }
func (peer) Method() string               { return http.MethodPost }
func (peer) Route() string                { return "" }
func (peer) Path() string                 { return "" }
func (peer) Context() context.Context     { return context.Background() }
func (peer) Unrouted() bool               { return false }
