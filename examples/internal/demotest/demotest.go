// Package demotest is the test suite every example passes: it builds the
// example's app over limiters with small limits and sends it real requests
// through the framework, checking what a client would see.
package demotest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
)

// Client sends one request through an app and returns its response.
type Client func(*http.Request) (*http.Response, error)

// Handler returns the Client of a net/http handler, served in process by
// httptest: the middleware sets the rate-limit fields under their
// canonical names, where the recorder's Header.Get finds them.
func Handler(h http.Handler) Client {
	return func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result(), nil
	}
}

// Generous returns policies of 1000 requests an hour for every limit, with
// the algorithms of demo.DefaultPolicies: no test meets them unless it
// lowers one.
func Generous() demo.Policies {
	p := demo.DefaultPolicies()
	for _, q := range []*core.Policy{&p.Global, &p.Login, &p.API, &p.Users} {
		q.Limit, q.Window, q.Burst = 1000, time.Hour, 0
	}
	return p
}

// Run runs the suite against the app newApp builds over the given limiters.
func Run(t *testing.T, newApp func(demo.Limiters) Client) {
	t.Run("GlobalLimit", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Global.Limit = 2
		c := build(t, newApp, p)
		for i, want := range []string{"1", "0"} {
			res := c.do(t, "GET", "/", nil)
			c.wantStatus(t, res, http.StatusOK)
			assert.Equal(t, want, res.Header.Get("X-RateLimit-Remaining"), "request %d: X-RateLimit-Remaining", i+1)
		}
		c.wantDenied(t, c.do(t, "GET", "/", nil), "2")
	})

	t.Run("GlobalLimitCoversEveryRoute", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Global.Limit = 2
		c := build(t, newApp, p)
		c.wantStatus(t, c.do(t, "GET", "/no-such-route", nil), http.StatusNotFound)
		c.wantStatus(t, c.login(t, "wrong"), http.StatusUnauthorized)
		c.wantDenied(t, c.do(t, "GET", "/", nil), "2")
	})

	t.Run("Quota", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Global.Limit = 10
		c := build(t, newApp, p)
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
		c.wantStatus(t, c.login(t, "wrong"), http.StatusUnauthorized)
		var q struct {
			Layers []struct {
				Name      string   `json:"name"`
				Limit     int64    `json:"limit"`
				Remaining int64    `json:"remaining"`
				Routes    []string `json:"routes"`
			} `json:"layers"`
		}
		for range 5 { // spending nothing
			res := c.do(t, "GET", demo.QuotaPath, nil)
			c.wantStatus(t, res, http.StatusOK)
			c.decodeJSON(t, res, &q)
		}
		byName := map[string]int64{}
		for _, l := range q.Layers {
			byName[l.Name] = l.Remaining
		}
		assert.Equal(t, int64(8), byName[p.Global.Name], "two requests so far: %+v", q.Layers)
		assert.Equal(t, limits.Capacity(p.Login.Algorithm, p.Login.Limit, p.Login.Burst)-1, byName[p.Login.Name], "one login so far: %+v", q.Layers)
		res := c.do(t, "GET", "/", nil)
		assert.Equal(t, "7", res.Header.Get("X-RateLimit-Remaining"), "the next request starts from the quota shown")
	})

	t.Run("LoginLimit", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Login.Limit, p.Login.Lockout, p.Login.LockoutMax = 2, 0, 0
		c := build(t, newApp, p)
		c.wantStatus(t, c.login(t, "wrong"), http.StatusUnauthorized)
		c.wantStatus(t, c.do(t, "POST", "/login", nil), http.StatusUnauthorized) // no password at all
		c.wantDenied(t, c.login(t, "wrong"), "2")
		// The login limit is the login route's only.
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
		c.wantStatus(t, c.do(t, "GET", "/api/data", http.Header{demo.APIKeyHeader: {"k"}}), http.StatusOK)
	})

	t.Run("LoginLockout", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Login = demo.DefaultPolicies().Login // 5 per 15m, then locked out 30m
		c := build(t, newApp, p)
		for i, remaining := range []string{"4", "3", "2", "1", "0"} {
			res := c.login(t, "guess")
			c.wantStatus(t, res, http.StatusUnauthorized)
			assert.Equal(t, remaining, res.Header.Get("X-RateLimit-Remaining"), "attempt %d", i+1)
		}
		// The 6th attempt locks the client out for 30 minutes (the
		// store's clock stands still: to the second), the right password
		// no better than a wrong one.
		for _, password := range []string{"guess", demo.DemoPassword, demo.DemoPassword} {
			res := c.login(t, password)
			c.wantDenied(t, res, "5")
			assert.Equal(t, "1800", res.Header.Get("Retry-After"), "password %q: Retry-After, the lockout's", password)
		}
		// The lockout is the login route's only.
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
	})

	t.Run("LoginClearsStrikes", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Login = demo.DefaultPolicies().Login
		c := build(t, newApp, p)
		for range 4 {
			c.wantStatus(t, c.login(t, "guess"), http.StatusUnauthorized)
		}
		res := c.login(t, demo.DemoPassword)
		c.wantStatus(t, res, http.StatusOK)
		var body struct{ Message string }
		c.decodeJSON(t, res, &body)
		assert.Equal(t, "logged in", body.Message, "the JSON body's message")
		// The login reset the client's attempts: 5 more pass, where the
		// next one would otherwise have locked it out.
		for i := range 5 {
			res := c.login(t, "guess")
			c.wantStatus(t, res, http.StatusUnauthorized)
			var body struct{ Error string }
			c.decodeJSON(t, res, &body)
			assert.Equal(t, "invalid_credentials", body.Error, "attempt %d after the login: the JSON body's error", i+1)
		}
		c.wantDenied(t, c.login(t, "guess"), "5")
	})

	t.Run("DeniedLoginsTakeNoGlobalQuota", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Global.Limit = 3
		p.Login.Limit, p.Login.Lockout, p.Login.LockoutMax = 1, 0, 0
		c := build(t, newApp, p)
		c.wantStatus(t, c.login(t, "wrong"), http.StatusUnauthorized)
		// Ten logins over the login limit: denied by the login layer,
		// they take nothing from the global one...
		for range 10 {
			c.wantDenied(t, c.login(t, "wrong"), "1")
		}
		// ...which has the two requests left that the one login did not
		// take, and says so.
		res := c.do(t, "GET", "/", nil)
		c.wantStatus(t, res, http.StatusOK)
		assert.Equal(t, "1", res.Header.Get("X-RateLimit-Remaining"), "the global layer, after one admitted login and this request")
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
		c.wantDenied(t, c.do(t, "GET", "/", nil), "3")
	})

	t.Run("APIKeyLimit", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.API.Limit = 2
		c := build(t, newApp, p)
		alice := http.Header{demo.APIKeyHeader: {"alice-key"}}
		for range 2 {
			res := c.do(t, "GET", "/api/data", alice)
			c.wantStatus(t, res, http.StatusOK)
			assert.Equal(t, "2", res.Header.Get("X-RateLimit-Limit"), "X-RateLimit-Limit: the API limit")
		}
		c.wantDenied(t, c.do(t, "GET", "/api/data", alice), "2")
		// Another key, from the same address, has a quota of its own.
		c.wantStatus(t, c.do(t, "GET", "/api/data", http.Header{demo.APIKeyHeader: {"bob-key"}}), http.StatusOK)
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
	})

	t.Run("APIKeyMissing", func(t *testing.T) {
		t.Parallel()
		c := build(t, newApp, Generous())
		res := c.do(t, "GET", "/api/data", nil)
		c.wantStatus(t, res, http.StatusBadRequest)
		var body struct{ Error string }
		c.decodeJSON(t, res, &body)
		assert.Equal(t, "rate_limit_key_missing", body.Error, "the JSON body's error")
	})

	t.Run("UsersLimitPerRoute", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Users.Limit = 1
		c := build(t, newApp, p)
		res := c.do(t, "GET", "/users/1", nil)
		c.wantStatus(t, res, http.StatusOK)
		var body struct{ ID string }
		c.decodeJSON(t, res, &body)
		assert.Equal(t, "1", body.ID, "the JSON body's id")
		// Another id is the same route: the same quota.
		c.wantDenied(t, c.do(t, "GET", "/users/2", nil), "1")
		// Another route under the same limiter has a quota of its own.
		c.wantStatus(t, c.do(t, "GET", "/users/1/posts", nil), http.StatusOK)
		c.wantDenied(t, c.do(t, "GET", "/users/2/posts", nil), "1")
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
	})
}

// client is an app under test with a frozen clock.
type client struct {
	send Client
}

// build returns the app newApp builds over a fresh memory store and the
// limits p. The store's time is frozen, so that no window ends and no
// bucket refills during a test.
func build(t *testing.T, newApp func(demo.Limiters) Client, p demo.Policies) client {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatalf("memstore.New: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	t0 := time.Now()
	l, err := demo.NewLimiters(clockstore.At(store, t0), p)
	if err != nil {
		t.Fatalf("NewLimiters: %v", err)
	}
	return client{send: newApp(l)}
}

// login sends POST /login with the form field demo.PasswordField set to
// password.
func (c client) login(t *testing.T, password string) *http.Response {
	t.Helper()
	form := url.Values{demo.PasswordField: {password}}.Encode()
	return c.request(t, httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form)),
		http.Header{"Content-Type": {"application/x-www-form-urlencoded"}})
}

// do sends method path with headers h and returns the response, whose body
// is read to the end and replaced by a copy.
func (c client) do(t *testing.T, method, path string, h http.Header) *http.Response {
	t.Helper()
	return c.request(t, httptest.NewRequest(method, path, nil), h)
}

// request sends req with headers h added and returns the response, whose body
// is read to the end and replaced by a copy.
func (c client) request(t *testing.T, req *http.Request, h http.Header) *http.Response {
	t.Helper()
	method, path := req.Method, req.URL.Path
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v) // canonicalizes k
		}
	}
	res, err := c.send(req)
	require.NoError(t, err, "%s %s", method, path)
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	require.NoError(t, err, "%s %s: reading the body", method, path)
	res.Body = io.NopCloser(strings.NewReader(string(body)))
	res.Request = req
	return res
}

func (client) wantStatus(t *testing.T, res *http.Response, want int) {
	t.Helper()
	if res.StatusCode != want {
		body, _ := io.ReadAll(res.Body)
		require.Equal(t, want, res.StatusCode, "%s %s: status; body %s", res.Request.Method, res.Request.URL.Path, body)
	}
}

// wantDenied checks the middleware's answer to a request over its limit:
// 429, Retry-After, the limit in X-RateLimit-Limit, and the body of
// httplimit.DefaultResponder for that Retry-After.
func (c client) wantDenied(t *testing.T, res *http.Response, limit string) {
	t.Helper()
	c.wantStatus(t, res, http.StatusTooManyRequests)
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After")
	assert.GreaterOrEqual(t, ra, 1, "Retry-After")
	assert.Equal(t, limit, res.Header.Get("X-RateLimit-Limit"), "X-RateLimit-Limit")
	assert.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"), "X-RateLimit-Remaining")
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"), "Content-Type")
	var want recorder
	httplimit.DefaultResponder(nil, &want, core.Decision{RetryAfter: time.Duration(ra) * time.Second}, nil)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	assert.Equal(t, want.body, string(body), "body: the default one, retry_after_seconds = Retry-After")
}

// recorder is an httplimit.Response that keeps the body written.
type recorder struct{ body string }

func (*recorder) Set(string, string) {}

func (r *recorder) Write(_ int, _ string, body []byte) error {
	r.body = string(body)
	return nil
}

// decodeJSON checks that res is JSON and decodes its body into v.
func (client) decodeJSON(t *testing.T, res *http.Response, v any) {
	t.Helper()
	assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "application/json"), "Content-Type %q", res.Header.Get("Content-Type"))
	require.NoError(t, json.NewDecoder(res.Body).Decode(v), "decoding the JSON body")
}
