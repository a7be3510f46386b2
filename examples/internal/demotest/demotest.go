// Package demotest is the test suite every example passes: it builds the
// example's app over limiters with small limits and sends it real requests
// through the framework, checking what a client would see.
package demotest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
)

// Client sends one request through an app and returns its response.
type Client func(*http.Request) (*http.Response, error)

// Handler returns the Client of a net/http handler, served in process by
// httptest.
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
			if got := res.Header.Get("X-RateLimit-Remaining"); got != want {
				t.Errorf("request %d: X-RateLimit-Remaining = %q, want %q", i+1, got, want)
			}
		}
		c.wantDenied(t, c.do(t, "GET", "/", nil), "2")
	})

	t.Run("GlobalLimitCoversEveryRoute", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Global.Limit = 2
		c := build(t, newApp, p)
		c.wantStatus(t, c.do(t, "GET", "/no-such-route", nil), http.StatusNotFound)
		c.wantStatus(t, c.do(t, "POST", "/login", nil), http.StatusOK)
		c.wantDenied(t, c.do(t, "GET", "/", nil), "2")
	})

	t.Run("LoginLimit", func(t *testing.T) {
		t.Parallel()
		p := Generous()
		p.Login.Limit = 2
		c := build(t, newApp, p)
		c.wantStatus(t, c.do(t, "POST", "/login", nil), http.StatusOK)
		c.wantStatus(t, c.do(t, "POST", "/login", nil), http.StatusOK)
		c.wantDenied(t, c.do(t, "POST", "/login", nil), "2")
		// The login limit is the login route's only.
		c.wantStatus(t, c.do(t, "GET", "/", nil), http.StatusOK)
		c.wantStatus(t, c.do(t, "GET", "/api/data", http.Header{demo.APIKeyHeader: {"k"}}), http.StatusOK)
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
			if got := res.Header.Get("X-RateLimit-Limit"); got != "2" {
				t.Errorf("X-RateLimit-Limit = %q, want the API limit, 2", got)
			}
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
		if body.Error != httplimit.CodeKeyMissing {
			t.Errorf("error = %q, want %q", body.Error, httplimit.CodeKeyMissing)
		}
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
		if body.ID != "1" {
			t.Errorf("id = %q, want 1", body.ID)
		}
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
// limits p. The limiters' clock is frozen, so that no window ends and no
// bucket refills during a test.
func build(t *testing.T, newApp func(demo.Limiters) Client, p demo.Policies) client {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatalf("memstore.New: %v", err)
	}
	t.Cleanup(func() { _ = store.Close() })
	t0 := time.Now()
	l, err := demo.NewLimiters(store, p, core.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatalf("NewLimiters: %v", err)
	}
	return client{send: newApp(l)}
}

// do sends method path with headers h and returns the response, whose body
// is read to the end and replaced by a copy.
func (c client) do(t *testing.T, method, path string, h http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v) // canonicalizes k
		}
	}
	res, err := c.send(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	res.Body = io.NopCloser(strings.NewReader(string(body)))
	res.Request = req
	return res
}

func (client) wantStatus(t *testing.T, res *http.Response, want int) {
	t.Helper()
	if res.StatusCode != want {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("%s %s: status %d, want %d; body %s", res.Request.Method, res.Request.URL.Path, res.StatusCode, want, body)
	}
}

// wantDenied checks the middleware's answer to a request over its limit:
// 429, Retry-After, the limit in X-RateLimit-Limit and the JSON body.
func (c client) wantDenied(t *testing.T, res *http.Response, limit string) {
	t.Helper()
	c.wantStatus(t, res, http.StatusTooManyRequests)
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	if err != nil || ra < 1 {
		t.Errorf("Retry-After = %q, want a delay of at least 1 second", res.Header.Get("Retry-After"))
	}
	if got := res.Header.Get("X-RateLimit-Limit"); got != limit {
		t.Errorf("X-RateLimit-Limit = %q, want %q", got, limit)
	}
	if got := res.Header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining = %q, want 0", got)
	}
	var body struct {
		Error             string `json:"error"`
		Message           string `json:"message"`
		RetryAfterSeconds int    `json:"retry_after_seconds"`
	}
	c.decodeJSON(t, res, &body)
	if body.Error != httplimit.CodeExceeded || body.Message == "" || body.RetryAfterSeconds != ra {
		t.Errorf("body = %+v, want error %q, a message and retry_after_seconds = Retry-After (%d)", body, httplimit.CodeExceeded, ra)
	}
}

// decodeJSON checks that res is JSON and decodes its body into v.
func (client) decodeJSON(t *testing.T, res *http.Response, v any) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		t.Fatalf("decoding the JSON body: %v", err)
	}
}
