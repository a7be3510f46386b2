package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

func TestDefaultPoliciesValidate(t *testing.T) {
	p := DefaultPolicies()
	for _, q := range []core.Policy{p.Global, p.Login, p.API, p.Users} {
		assert.NoError(t, q.Validate(), q.Name)
	}
}

func TestNewLimiters(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	l, err := NewLimiters(store, DefaultPolicies())
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Flow()
	require.NoError(t, err)
	layers := l.Limiter.Policies()
	require.Len(t, layers, 5)
	require.Len(t, l.Layers, 5)
	for i, name := range []string{"global", "login", "api", "users", PostsLayer} {
		assert.Equal(t, name, layers[i].Name, "layer %d", i)
		assert.Equal(t, name, l.Layers[i].Policy.Name, "layer %d", i)
		assert.Equal(t, name == LoginLayer, layers[i].FailClosed > 0, "%s: fails closed", name)
		assert.NotNil(t, l.Layers[i].Key, "%s: key", name)
	}
	assert.Empty(t, l.Guard, "no deny list unless DENY_FILE gives one")

	api := l.Layers[2].Key
	_, err = api(request{})
	assert.ErrorIs(t, err, keyfuncs.ErrNoKey, "API key without the header")
	k, err := api(request{header: http.Header{"X-Api-Key": {"secret"}}})
	require.NoError(t, err, "API key")
	assert.True(t, strings.HasPrefix(k, "key:"), "API key = %q, want a hashed key", k)
	assert.NotContains(t, k, "secret", "API key")
	k, err = l.Layers[3].Key(request{})
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", k, "users: per client IP")

	// The limiter reports to the metrics, served by l.Metrics: each
	// request under every layer that applied to it.
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l.Limiter, context.Background(), []core.Request{{Key: "ip:203.0.113.7", Cost: 1}, {Key: "ip:203.0.113.7", Cost: 1}}, time.Time{}, &v))
	require.True(t, v.Allowed)
	rec := httptest.NewRecorder()
	l.Metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, MetricsPath, nil))
	assert.Equal(t, http.StatusOK, rec.Code, "GET /metrics")
	for _, line := range []string{
		`ratelimit_decisions_total{limit="login",outcome="allowed"} 1`,
		`ratelimit_decisions_total{limit="global",outcome="allowed"} 1`,
		`ratelimit_decisions_total{limit="api",outcome="allowed"} 0`,
		`ratelimit_memstore_keys{store="memory"} 2`,
	} {
		assert.Contains(t, rec.Body.String(), "\n"+line+"\n", "GET /metrics")
	}

	p := DefaultPolicies()
	p.API.Limit = 0
	_, err = NewLimiters(store, p)
	assert.ErrorIs(t, err, core.ErrInvalidOption, "invalid API policy")
	assert.ErrorContains(t, err, `layer "api"`, "the error names the layer")
}

// request is a keyfuncs.Request from a fixed peer on a fixed route.
type request struct {
	route  string
	header http.Header
}

func (request) RemoteAddr() string                  { return "203.0.113.7:4321" }
func (r request) Header(name string) string         { return r.header.Get(name) }
func (r request) HeaderValues(name string) []string { return r.header.Values(name) }
func (request) Method() string                      { return http.MethodGet }
func (r request) Route() string                     { return r.route }
func (request) Unrouted() bool                      { return false }
func (request) Path() string                        { return "" } // unknown: layers match Route
func (request) Context() context.Context            { return context.Background() }

func TestDescribe(t *testing.T) {
	p := DefaultPolicies()
	for _, tc := range []struct {
		p    core.Policy
		want string
	}{
		{p.Global, "token bucket, 100 per 1m, burst 20"},
		{p.Login, "sliding window log, 5 per 15m, then locked out 30m, doubling up to 24h"},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute, Lockout: time.Minute}, "fixed window, 3 per 1m, then locked out 1m"},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute, Lockout: time.Minute, LockoutMax: time.Minute}, "fixed window, 3 per 1m, then locked out 1m"},
		{core.Policy{Algorithm: core.TokenBucket, Limit: 3, Window: time.Minute, Lockout: 10 * time.Second, LockoutMax: time.Hour, LockoutMemory: 2 * time.Hour},
			"token bucket, 3 per 1m, burst 3, then locked out 10s, doubling up to 1h (offences remembered 2h)"},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute, Lockout: 0}, "fixed window, 3 per 1m"},
		{p.API, "sliding window counter, 1000 per 1h"},
		{core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: 90 * time.Minute}, "leaky bucket, 10 per 1h30m, burst 10"},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: 10 * time.Second}, "fixed window, 3 per 10s"},
	} {
		assert.Equal(t, tc.want, Describe(tc.p), "Describe(%+v)", tc.p)
	}
}

func TestBaseURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080":      "http://127.0.0.1:8080",
		"0.0.0.0:8080":        "http://127.0.0.1:8080",
		"[::]:8080":           "http://127.0.0.1:8080",
		"[::1]:8080":          "http://[::1]:8080",
		"[::ffff:10.0.0.1]:1": "http://10.0.0.1:1",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		assert.Equal(t, want, BaseURL(a), "BaseURL(%s)", addr)
	}
}

func TestWriteBanner(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	var b bytes.Buffer
	require.NoError(t, WriteBanner(&b, "chi", addr, "memory", nil, DefaultPolicies()))
	for _, want := range []string{
		"ratelimit demo (chi) listening on http://127.0.0.1:8080\n",
		"store: memory",
		"deny list: none (set DENY_FILE=./deny.txt to answer 403 to the addresses and CIDR ranges it lists, one a line; reloaded when it changes)\n",
		"for i in $(seq 1 25); do curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:8080/; done",
		"wait 12s",
		"  POST /login      sliding window log, 5 per 15m, then locked out 30m, doubling up to 24h, per client IP (password=demo logs in and clears the strikes)\n",
		"  curl -i -d password=demo http://127.0.0.1:8080/login\n",
		"  # wrong ones: 5 pass (401), the 6th locks this client out for 30m (429, Retry-After: 1800), even with the right password\n",
		"  for i in $(seq 1 6); do curl -s -o /dev/null -w '%{http_code}\\n' -d password=wrong http://127.0.0.1:8080/login; done\n",
		"curl -i -H 'X-API-Key: demo' http://127.0.0.1:8080/api/data",
		"curl -i http://127.0.0.1:8080/users/42",
		"per client IP (but GET /metrics)\n",
		`metrics: GET http://127.0.0.1:8080/metrics, never limited, for Prometheus (limit="global", "login", "api", "users", "posts")` + "\n",
		"curl -s http://127.0.0.1:8080/metrics | grep '^ratelimit_decisions_total'\n",
	} {
		assert.Contains(t, b.String(), want, "the banner")
	}
	assert.NotContains(t, b.String(), "echo 127.0.0.1 >>", "no deny list: no line to add to it")
	// The password=demo line comes before the lockout, so that the lines
	// run in order log in first.
	assert.Less(t, strings.Index(b.String(), "curl -i -d password=demo"), strings.Index(b.String(), "-d password=wrong"))

	// A login policy without a lockout: the loop shows plain 429s.
	p := DefaultPolicies()
	p.Login.Lockout, p.Login.LockoutMax = 0, 0
	b.Reset()
	require.NoError(t, WriteBanner(&b, "chi", addr, "memory", nil, p))
	assert.Contains(t, b.String(), "  # wrong ones: 5 pass (401), then 429 with Retry-After\n")
	assert.Contains(t, b.String(), "for i in $(seq 1 7); do curl -s -o /dev/null -w '%{http_code}\\n' -d password=wrong http://127.0.0.1:8080/login; done\n")
	assert.NotContains(t, b.String(), "locked out")
}

func TestWriteBannerDenyList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's here")
	require.NoError(t, os.Mkdir(dir, 0o700))
	path := filepath.Join(dir, "deny.txt")
	require.NoError(t, os.WriteFile(path, []byte("# two entries\n192.0.2.0/24\n2001:db8::/32\n"), 0o600))
	f, err := OpenDenyList(path, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })

	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	var b bytes.Buffer
	require.NoError(t, WriteBanner(&b, "gin", addr, "memory", f, DefaultPolicies()))
	for _, want := range []string{
		"deny list: " + path + " (2 entries; reloaded when it changes): a listed address or range gets 403 on every request but GET /metrics\n",
		"  # deny this very client: within a moment every request gets 403 (but GET /metrics); delete the line to lift it\n",
		"  echo 127.0.0.1 >> '" + strings.ReplaceAll(path, "'", `'\''`) + "'\n",
	} {
		assert.Contains(t, b.String(), want, "the banner")
	}

	// A curl to [::1] comes from ::1.
	b.Reset()
	require.NoError(t, WriteBanner(&b, "gin", &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, "memory", f, DefaultPolicies()))
	assert.Contains(t, b.String(), "  echo ::1 >> '")
	assert.Contains(t, b.String(), "  curl -i http://[::1]:8080/\n")
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/deny.txt":  "/tmp/deny.txt",
		"./a-b_c.txt":    "./a-b_c.txt",
		"/tmp/my list":   "'/tmp/my list'",
		"/tmp/it's":      `'/tmp/it'\''s'`,
		"":               "''",
		"/tmp/$(reboot)": "'/tmp/$(reboot)'",
	} {
		assert.Equal(t, want, shellQuote(in), "shellQuote(%q)", in)
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int64]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 6: "6th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		assert.Equal(t, want, ordinal(n), "ordinal(%d)", n)
	}
}

func TestAddr(t *testing.T) {
	t.Setenv("ADDR", "")
	assert.Equal(t, DefaultAddr, Addr(), "Addr() without ADDR")
	t.Setenv("ADDR", ":9090")
	assert.Equal(t, ":9090", Addr(), "Addr() with ADDR")
}

func TestOpenStoreMemory(t *testing.T) {
	s, err := OpenStore(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Store.(*memstore.Store); !ok || s.Name != "memory" {
		t.Errorf("OpenStore(\"\") = %T named %q, want the memory store", s.Store, s.Name)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func TestOpenStoreBadURL(t *testing.T) {
	_, err := OpenStore(context.Background(), "http://127.0.0.1:6379")
	assert.ErrorContains(t, err, "REDIS_URL")
}

func TestOpenStoreRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	_, err = OpenStore(ctx, "redis://"+addr+"/0")
	assert.ErrorContains(t, err, "does not answer")
}

func TestOpenStoreRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	s, err := OpenStore(ctx, "redis://"+srv.Addr()+"/0")
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	assert.True(t, strings.HasPrefix(s.Name, "redis at "+srv.Addr()), "Name = %q, want redis at %s", s.Name, srv.Addr())
	l, err := core.NewLimiter(s.Store, []core.Policy{{Name: "demo-test", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}})
	require.NoError(t, err)
	key := "test-" + time.Now().Format(time.RFC3339Nano)
	for i, want := range []bool{true, false} {
		d, err := l.AllowN(ctx, key, 1, time.Time{})
		require.NoError(t, err, "Allow #%d", i+1)
		require.Equal(t, want, d.Allowed, "Allow #%d: Allowed", i+1)
	}
	assert.NoError(t, l.Reset(ctx, key))
}

// TestRun serves a handler through run, then ends its context, as a signal
// would: run must shut the server down gracefully and return nil.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	var got Limiters
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &out, &out, "test", environment{addr: "127.0.0.1:0"}, func(l Limiters) Server {
			_, err := l.Flow()
			assert.NoError(t, err)
			got = l
			return HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}))
		})
	}()

	var base string
	deadline := testwait.Deadline(10 * time.Second)
	for base == "" {
		if _, rest, ok := strings.Cut(out.String(), ListeningPrefix); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				base = line
				break
			}
		}
		select {
		case err := <-done:
			require.Failf(t, "run returned early", "%v", err)
		case <-time.After(10 * time.Millisecond):
		}
		require.False(t, time.Now().After(deadline), "no banner within %v", testwait.D(10*time.Second))
	}
	require.NotNil(t, got.Limiter, "the server's limiter")
	assert.Equal(t, DefaultPolicies().Global, got.Limiter.Policies()[0], "the server's first layer: the global policy")
	c := &http.Client{Timeout: testwait.D(5 * time.Second)}
	res, err := c.Get(base + "/")
	require.NoError(t, err)
	_ = res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "status")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "run after a graceful shutdown")
	case <-time.After(ShutdownTimeout + testwait.D(5*time.Second)):
		require.Fail(t, "run did not return after its context ended")
	}
	assert.True(t, strings.HasSuffix(out.String(), "stopped\n"), "output does not end with the stop:\n%s", out.String())
}

func TestRunListenError(t *testing.T) {
	err := run(context.Background(), io.Discard, io.Discard, "test", environment{addr: "256.0.0.1:0"}, func(Limiters) Server {
		return HTTPServer(http.NotFoundHandler())
	})
	assert.Error(t, err, "run on a bad address")
}

// syncBuffer is a log or output destination one goroutine writes while
// another reads it.
type syncBuffer = syncbuf.Buffer

// TestSkipMetrics: only GET on the metrics route is spared the limits.
func TestSkipMetrics(t *testing.T) {
	for _, tc := range []struct {
		method, route string
		want          bool
	}{
		{http.MethodGet, MetricsPath, true},
		{http.MethodPost, MetricsPath, false},
		{http.MethodGet, "/metrics/", false},
		{http.MethodGet, "", false},
		{http.MethodGet, "/", false},
	} {
		assert.Equal(t, tc.want, SkipMetrics(methodRequest{request{route: tc.route}, tc.method}), "%s %q", tc.method, tc.route)
	}
}

// methodRequest is a request with a method of its own.
type methodRequest struct {
	request
	method string
}

func (r methodRequest) Method() string { return r.method }

// The login policy of the demo, as the banner describes it.
func ExampleDescribe() {
	fmt.Println(Describe(DefaultPolicies().Login))
	// Output: sliding window log, 5 per 15m, then locked out 30m, doubling up to 24h
}
