package demotest

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// reloadWithin bounds the wait for a deny list file's change to be in
// force: the File's debounce (100 ms) and a busy machine.
var reloadWithin = testwait.D(10 * time.Second)

// DenyList serves the example's app, as newServer builds it, on a
// loopback port with a deny list file in Limiters.Guard, as DENY_FILE
// gives it, and checks, through a real socket, that: a client the file
// does not list passes; once the file (replaced by a rename) lists the
// client, every request of it gets 403 with the forbidden body and no
// rate-limit header, whatever the route (404s, the login and the API
// without a key included), but GET /metrics, skipped before any list;
// each 403 is counted deny_listed under the global limit, and no other
// limit hears of it; a malformed version of the file leaves the last good
// list in force; and once the line is gone, the client passes again.
func DenyList(t *testing.T, newServer func(demo.Limiters) demo.Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "deny.txt")
	replaceFile(t, path, "# not this client\n198.51.100.0/24\n")
	deny, err := demo.OpenDenyList(path, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, deny.Close()) })

	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	l, err := demo.NewLimiters(store, Generous())
	require.NoError(t, err)
	l.Guard = []httplimit.Option{httplimit.WithDenyList(deny)}
	base := serve(t, newServer(l))
	c := &http.Client{Timeout: testwait.D(5 * time.Second)}

	var allowed, forbidden int // GET / as the global limit decides it
	get := func() int {
		res := send(t, c, "GET", base+"/", nil)
		switch res.StatusCode {
		case http.StatusOK:
			allowed++
		case http.StatusForbidden:
			forbidden++
		default:
			require.Failf(t, "GET /", "status %d: %s", res.StatusCode, res.body)
		}
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, get(), "GET /, not listed")

	replaceFile(t, path, "198.51.100.0/24\n127.0.0.1 reason=the test\n")
	require.Eventually(t, func() bool { return get() == http.StatusForbidden }, reloadWithin, 20*time.Millisecond,
		"GET / refused once the file lists the client")

	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for _, r := range []struct {
		method, path string
		h            http.Header
		body         string
	}{
		{"GET", "/", nil, ""},
		{"GET", "/no-such-route", nil, ""},
		{"POST", "/login", form, "password=" + demo.DemoPassword},
		{"GET", "/api/data", http.Header{demo.APIKeyHeader: {"alice-key"}}, ""},
		{"GET", "/api/data", nil, ""}, // no key: refused before the API limiter would answer 400
		{"GET", "/users/1", nil, ""},
		{"GET", "/users/1/posts", nil, ""},
		{"POST", demo.MetricsPath, nil, ""}, // only GET /metrics is skipped
	} {
		res := sendBody(t, c, r.method, base+r.path, r.h, r.body)
		require.Equal(t, http.StatusForbidden, res.StatusCode, "%s %s: %s", r.method, r.path, res.body)
		forbidden++
		assert.JSONEq(t, `{"error":"forbidden","message":"Access denied."}`, string(res.body), "%s %s: the body", r.method, r.path)
		for name := range res.Header {
			n := strings.ToLower(name)
			assert.False(t, strings.HasPrefix(n, "x-ratelimit") || strings.HasPrefix(n, "ratelimit") || n == "retry-after",
				"%s %s: header %s on a 403", r.method, r.path, name)
		}
	}

	// A malformed version is not applied: the client stays refused.
	replaceFile(t, path, "198.51.100.0/24\n10.1.2.3/8\n")
	require.Error(t, deny.Reload(), "the malformed file")
	assert.Equal(t, http.StatusForbidden, get(), "GET /: the last good list stays in force")

	samples := parseSamples(t, string(send(t, c, "GET", base+demo.MetricsPath, nil).body))
	for series, want := range map[string]int{
		`ratelimit_decisions_total{limit="global",outcome="deny_listed"}`: forbidden,
		`ratelimit_decisions_total{limit="global",outcome="allowed"}`:     allowed,
		`ratelimit_decisions_total{limit="login",outcome="deny_listed"}`:  0,
		`ratelimit_decisions_total{limit="login",outcome="allowed"}`:      0,
		`ratelimit_decisions_total{limit="api",outcome="deny_listed"}`:    0,
		`ratelimit_decisions_total{limit="api",outcome="allowed"}`:        0,
		`ratelimit_decisions_total{limit="users",outcome="deny_listed"}`:  0,
		`ratelimit_decisions_total{limit="users",outcome="allowed"}`:      0,
	} {
		assert.Equal(t, fmt.Sprint(want), samples[series], series)
	}

	replaceFile(t, path, "198.51.100.0/24\n")
	require.Eventually(t, func() bool { return get() == http.StatusOK }, reloadWithin, 20*time.Millisecond,
		"GET / served again once the line is gone")
	res := send(t, c, "GET", base+"/users/1", nil)
	assert.Equal(t, http.StatusOK, res.StatusCode, "GET /users/1 after the line is gone")
}

// replaceFile replaces the file at path with content by a rename, as the
// access package recommends.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}
