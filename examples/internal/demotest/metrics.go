package demotest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// Metrics serves the example's app, as newServer builds it (the server
// main runs), on a loopback port over a memory store, sends it known
// traffic through a real socket, then scrapes GET /metrics twice and
// finds every decision of every limit counted exactly, the scrapes
// themselves neither limited nor counted. The login limit is the default
// one: 5 wrong passwords pass, the 6th attempt locks the client out
// (Retry-After 1800) and is counted locked_out, as is the right password
// sent during the lockout.
func Metrics(t *testing.T, newServer func(demo.Limiters) demo.Server) {
	t.Helper()
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	p := Generous()
	p.Login = demo.DefaultPolicies().Login
	// Each request counts under every layer that applied to it, with that
	// layer's own outcome.
	p.API.Limit, p.Users.Limit = 10, 10
	l, err := demo.NewLimiters(store, p)
	require.NoError(t, err)
	base := serve(t, newServer(l))
	c := &http.Client{Timeout: testwait.D(5 * time.Second)}

	alice := http.Header{demo.APIKeyHeader: {"alice-key"}}
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for _, r := range []struct {
		method, path string
		h            http.Header
		want         int
		body         string
	}{
		{"GET", "/", nil, http.StatusOK, ""},
		{"GET", "/", nil, http.StatusOK, ""},
		{"GET", "/", nil, http.StatusOK, ""},
		{"POST", "/login", form, http.StatusUnauthorized, "password=guess1"},
		{"POST", "/login", form, http.StatusUnauthorized, "password=guess2"},
		{"POST", "/login", form, http.StatusUnauthorized, "password=guess3"},
		{"POST", "/login", form, http.StatusUnauthorized, "password=guess4"},
		{"POST", "/login", nil, http.StatusUnauthorized, ""},
		{"POST", "/login", form, http.StatusTooManyRequests, "password=guess6"}, // locked out
		{"POST", "/login", form, http.StatusTooManyRequests, "password=" + demo.DemoPassword},
		{"GET", "/api/data", alice, http.StatusOK, ""},
		{"GET", "/api/data", alice, http.StatusOK, ""},
		{"GET", "/api/data", nil, http.StatusBadRequest, ""}, // no key: the API limiter never decides
		{"GET", "/users/1", nil, http.StatusOK, ""},
		{"GET", "/no-such-route", nil, http.StatusNotFound, ""},
	} {
		res := sendBody(t, c, r.method, base+r.path, r.h, r.body)
		require.Equal(t, r.want, res.StatusCode, "%s %s %s: %s", r.method, r.path, r.body, res.body)
		if r.want == http.StatusTooManyRequests {
			assert.Equal(t, "1800", res.Header.Get("Retry-After"), "%s %s: the lockout's Retry-After", r.method, r.path)
		}
	}
	// The global layer applies to every request the limiter decides (all
	// but the one without an API key) and had room for each, the locked
	// out logins included: each layer counts what it applied to.
	const global = 14

	for i := range 3 { // scrapes: none limited, none counted
		res := send(t, c, "GET", base+demo.MetricsPath, nil)
		require.Equal(t, http.StatusOK, res.StatusCode, "scrape %d", i+1)
		assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain"), "scrape %d: Content-Type %q", i+1, res.Header.Get("Content-Type"))
		for name := range res.Header {
			assert.False(t, strings.HasPrefix(strings.ToLower(name), "x-ratelimit") || strings.HasPrefix(strings.ToLower(name), "ratelimit"),
				"scrape %d: header %s: /metrics is not limited", i+1, name)
		}
	}
	exposition := string(send(t, c, "GET", base+demo.MetricsPath, nil).body)
	samples := parseSamples(t, exposition)

	want := map[string]map[string]int{
		p.Global.Name: {"allowed": global},
		p.Login.Name:  {"allowed": 5, "locked_out": 2},
		p.API.Name:    {"allowed": 2},
		p.Users.Name:  {"allowed": 1},
	}
	for limit, counts := range want {
		for _, o := range outcome.All() {
			series := fmt.Sprintf(`ratelimit_decisions_total{limit=%q,outcome=%q}`, limit, o.String())
			if assert.Contains(t, samples, series) {
				assert.Equal(t, fmt.Sprint(counts[o.String()]), samples[series], series)
			}
		}
		assert.Equal(t, "1", samples[fmt.Sprintf(`ratelimit_store_health{limit=%q,state="healthy"}`, limit)], "%s: health", limit)
	}
	// As a person or a scraper reads it: one line.
	assert.Contains(t, exposition, fmt.Sprintf("\nratelimit_decisions_total{limit=%q,outcome=\"allowed\"} %d\n", p.Global.Name, global))
	// The login's 5th admission left 0 of 5.
	assert.Equal(t, "1", samples[fmt.Sprintf(`ratelimit_near_limit_total{limit=%q}`, p.Login.Name)], "near limit")
	// One key per limit, the client's address (global, login, users) or
	// its API key, and the login's lockout entry, written by the offence.
	assert.Equal(t, "5", samples[fmt.Sprintf(`ratelimit_memstore_keys{store=%q}`, demo.MemStoreName)], "memory store keys")
	assert.Contains(t, samples, "go_goroutines", "the Go collector")
}

// serve serves srv on a free loopback port until the test ends, and
// returns its base URL.
func serve(t *testing.T, srv demo.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.D(demo.ShutdownTimeout))
		defer cancel()
		assert.NoError(t, srv.Shutdown(ctx), "shutdown")
		select {
		case err := <-served:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				assert.NoError(t, err, "serve")
			}
		case <-ctx.Done():
			t.Error("the server did not stop")
		}
	})
	return "http://" + ln.Addr().String()
}

// response is a response whose body has been read.
type response struct {
	*http.Response
	body []byte
}

// send sends method url with headers h and reads the response.
func send(t *testing.T, c *http.Client, method, url string, h http.Header) response {
	t.Helper()
	return sendBody(t, c, method, url, h, "")
}

// sendBody sends method url with headers h and body and reads the
// response.
func sendBody(t *testing.T, c *http.Client, method, url string, h http.Header, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	res, err := c.Do(req)
	require.NoError(t, err, "%s %s", method, url)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err, "%s %s: reading the body", method, url)
	return response{res, b}
}

// parseSamples returns the samples of a text exposition, by series as
// written (`name{label="value",...}`), each value as written.
func parseSamples(t *testing.T, exposition string) map[string]string {
	t.Helper()
	samples := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "sample line %q", line)
		samples[line[:i]] = line[i+1:]
	}
	require.NoError(t, sc.Err())
	return samples
}
