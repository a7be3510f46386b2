package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	chilimit "github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

// loginLimiters returns limiters of DefaultPolicies over a memory store
// whose time stands still at t0, their Flow built.
func loginLimiters(t *testing.T) Limiters {
	t.Helper()
	l, _ := loginFlow(t)
	return l
}

// loginFlow is loginLimiters, and their Flow.
func loginFlow(t *testing.T) (Limiters, *httplimit.Flow) {
	t.Helper()
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	l, err := NewLimiters(clockstore.At(store, time.Now()), DefaultPolicies())
	require.NoError(t, err)
	f, err := l.Flow()
	require.NoError(t, err)
	return l, f
}

// loginAttempt is one decision of the login layer alone for key.
func loginAttempt(t *testing.T, l Limiters, key string) (core.Decision, error) {
	t.Helper()
	i := slices.IndexFunc(l.Limiter.Policies(), func(p core.Policy) bool { return p.Name == LoginLayer })
	require.GreaterOrEqual(t, i, 0, "the login layer")
	reqs := make([]core.Request, i+1)
	reqs[i] = core.Request{Key: key, Cost: 1}
	var v limitertest.Verdict
	err := limitertest.AllowLayers(l.Limiter, context.Background(), reqs, time.Time{}, &v)
	return v.Decision, err
}

// lockOut makes key's 6 login attempts, the 6th locking it out.
func lockOut(t *testing.T, l Limiters, key string) {
	t.Helper()
	for i := range 5 {
		d, err := loginAttempt(t, l, key)
		require.NoError(t, err)
		require.True(t, d.Allowed, "attempt %d", i+1)
	}
	d, err := loginAttempt(t, l, key)
	require.NoError(t, err)
	require.True(t, d.LockedOut, "the 6th attempt locks %s out", key)
	assert.Equal(t, 30*time.Minute, d.RetryAfter, "the first lockout")
}

// TestDefaultLoginLocksOut: the default login policy is the issue's
// brute-force guard.
func TestDefaultLoginLocksOut(t *testing.T) {
	p := DefaultPolicies().Login
	assert.Equal(t, [3]time.Duration{30 * time.Minute, 24 * time.Hour, 0}, [3]time.Duration{p.Lockout, p.LockoutMax, p.LockoutMemory})
	assert.Equal(t, time.Hour, limits.LockoutLength(p.Lockout, p.LockoutMax, 2), "the second lockout doubles")
	assert.Equal(t, 24*time.Hour, limits.LockoutLength(p.Lockout, p.LockoutMax, 10), "capped at a day")
	lockOut(t, loginLimiters(t), "ip:203.0.113.7")
}

func TestClearLoginStrikes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ remoteAddr, key string }{
		{"203.0.113.7:4321", "ip:203.0.113.7"},
		{"203.0.113.7", "ip:203.0.113.7"},
		{"[::ffff:203.0.113.7]:4321", "ip:203.0.113.7"},
		{"[2001:db8:1:1ff::9]:443", "ip:2001:db8:1:100::/56"},
	} {
		l := loginLimiters(t)
		lockOut(t, l, tc.key)
		other := "ip:198.51.100.1"
		lockOut(t, l, other)

		require.NoError(t, l.ClearLoginStrikes(ctx, tc.remoteAddr), tc.remoteAddr)
		d, err := loginAttempt(t, l, tc.key)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "%s: the lockout of %s is lifted", tc.remoteAddr, tc.key)
		assert.Equal(t, int64(4), d.Remaining, "%s: the attempts are forgotten too", tc.remoteAddr)
		d, err = loginAttempt(t, l, other)
		require.NoError(t, err)
		assert.True(t, d.LockedOut, "%s: another client stays locked out", tc.remoteAddr)
	}

	l := loginLimiters(t)
	for _, bad := range []string{"", "not-an-address", "example.com:80"} {
		assert.ErrorIs(t, l.ClearLoginStrikes(ctx, bad), keyfuncs.ErrNoKey, "ClearLoginStrikes(%q)", bad)
	}
	assert.Error(t, Limiters{}.ClearLoginStrikes(ctx, "203.0.113.7:1"), "zero Limiters: an error, no panic")
}

// TestClearLoginStrikesMatchesTheAdapter: the key ClearLoginStrikes
// clears is the one the login mount limits, through a real adapter.
func TestClearLoginStrikesMatchesTheAdapter(t *testing.T) {
	l, f := loginFlow(t)
	h := chilimit.New(f)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := l.Authenticate(r.Context(), r.RemoteAddr, r.PostFormValue(PasswordField))
		w.WriteHeader(status)
	}))
	login := func(password string) *http.Response {
		rec := httptest.NewRecorder()
		req, err := http.NewRequest(http.MethodPost, "/login", strings.NewReader(PasswordField+"="+password))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "[2001:db8::7]:5555"
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	for range 4 {
		assert.Equal(t, http.StatusUnauthorized, login("guess").StatusCode)
	}
	assert.Equal(t, http.StatusOK, login(DemoPassword).StatusCode, "the 5th attempt, right")
	// Without the Reset, the next attempt would be the 6th: locked out.
	for i := range 5 {
		assert.Equal(t, http.StatusUnauthorized, login("guess").StatusCode, "attempt %d after the login", i+1)
	}
	res := login(DemoPassword)
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "the 6th attempt since the login, right or not")
	assert.Equal(t, "1800", res.Header.Get("Retry-After"))
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	l := loginLimiters(t)
	key := "ip:203.0.113.7"
	for _, wrong := range []string{"", "Demo", "demo ", "demodemo", "wrong"} {
		status, body := l.Authenticate(ctx, "203.0.113.7:1", wrong)
		assert.Equal(t, http.StatusUnauthorized, status, "password %q", wrong)
		assert.Equal(t, "invalid_credentials", body["error"], "password %q", wrong)
	}
	lockOut(t, l, key)
	status, body := l.Authenticate(ctx, "203.0.113.7:1", DemoPassword)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, map[string]string{"message": "logged in"}, body)
	d, err := loginAttempt(t, l, key)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a login clears the strikes")

	// The right password from an address that is no IP: the strikes
	// cannot be cleared; refused, not a panic.
	status, _ = l.Authenticate(ctx, "pipe", DemoPassword)
	assert.Equal(t, http.StatusServiceUnavailable, status)
}

// TestAuthenticateStoreDown: a store that cannot clear the strikes makes
// the login answer 503, as the login limit fails closed.
func TestAuthenticateStoreDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	l, err := NewLimiters(rs, DefaultPolicies())
	require.NoError(t, err)
	_, err = l.Flow()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	require.ErrorIs(t, l.ClearLoginStrikes(ctx, "203.0.113.7:1"), limits.ErrStore)
	status, body := l.Authenticate(ctx, "203.0.113.7:1", DemoPassword)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "unavailable", body["error"])
}

func TestOpenDenyListMalformed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.txt")
	require.NoError(t, os.WriteFile(path, []byte("192.0.2.1\n10.1.2.3/8\n"), 0o600))
	_, err := OpenDenyList(path, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	assert.ErrorContains(t, err, fmt.Sprintf("line %d,", 2))
	assert.True(t, strings.HasPrefix(err.Error(), "DENY_FILE: "), "the error names the variable: %v", err)
	assert.Contains(t, err.Error(), path+": line 2,", "the error names the file and the line")

	_, err = OpenDenyList(filepath.Join(t.TempDir(), "missing.txt"), slog.New(slog.DiscardHandler))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "DENY_FILE: ")
}

// TestRunMalformedDenyFile: run refuses to start on a malformed deny list,
// before it listens or opens the store.
func TestRunMalformedDenyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.txt")
	require.NoError(t, os.WriteFile(path, []byte("# ok\n203.0.113.7\n1.2.3.4/33\n"), 0o600))
	var out bytes.Buffer
	err := run(context.Background(), &out, &out, "test", environment{addr: "127.0.0.1:0", denyFile: path}, func(Limiters) Server {
		t.Error("no server is built")
		return HTTPServer(http.NotFoundHandler())
	})
	require.Error(t, err)
	assert.ErrorContains(t, err, "DENY_FILE: ")
	assert.ErrorContains(t, err, "line 3,")
	assert.NotContains(t, out.String(), ListeningPrefix)
}

// TestRunDenyFile runs with DENY_FILE: the banner names it, Guard carries
// it to a mount, which answers 403 to a listed client once the file lists
// it, and serves it again once the line is gone; every reload is logged.
func TestRunDenyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deny.txt")
	writeFile(t, path, "198.51.100.0/24 reason=not us\n")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &out, &logs, "test", environment{addr: "127.0.0.1:0", denyFile: path}, func(l Limiters) Server {
			assert.Len(t, l.Guard, 1, "Guard: the deny list")
			// As the chi example mounts it.
			r := chi.NewRouter()
			f, err := l.Flow(httplimit.WithSkip(SkipMetrics))
			require.NoError(t, err)
			r.Use(chilimit.New(f))
			r.Method(http.MethodGet, MetricsPath, l.Metrics)
			r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
			return HTTPServer(r)
		})
	}()
	base := waitForBanner(t, &out, done)
	assert.Contains(t, out.String(), "deny list: "+path+" (1 entry; reloaded when it changes)")
	assert.Contains(t, out.String(), "echo 127.0.0.1 >> "+path+"\n")

	c := &http.Client{Timeout: testwait.D(5 * time.Second)}
	status := func(path string) int {
		res, err := c.Get(base + path)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, status("/"), "not listed")

	writeFile(t, path, "198.51.100.0/24\n127.0.0.0/8 reason=the test\n")
	require.Eventually(t, func() bool { return status("/") == http.StatusForbidden }, testwait.D(10*time.Second), 20*time.Millisecond, "listed once the file changed")
	assert.Equal(t, http.StatusForbidden, status("/anything"), "a 404 route too")
	assert.Equal(t, http.StatusOK, status(MetricsPath), "GET /metrics is skipped before the lists")
	assert.Contains(t, logs.String(), "accessfile: list reloaded")

	writeFile(t, path, "not an entry/\n")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "keeping the last good one") }, testwait.D(10*time.Second), 20*time.Millisecond, "a bad reload is logged")
	assert.Equal(t, http.StatusForbidden, status("/"), "the last good list stays in force")

	writeFile(t, path, "198.51.100.0/24\n")
	require.Eventually(t, func() bool { return status("/") == http.StatusOK }, testwait.D(10*time.Second), 20*time.Millisecond, "served again once the line is gone")

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "run after a graceful shutdown, the deny list closed")
	case <-time.After(ShutdownTimeout + testwait.D(5*time.Second)):
		require.Fail(t, "run did not return after its context ended")
	}
}

// writeFile replaces the file at path with content by a rename, as the
// access package recommends.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// waitForBanner waits, at most 10 s, for run's banner, and returns the URL
// it gives.
func waitForBanner(t *testing.T, out *syncBuffer, done <-chan error) string {
	t.Helper()
	deadline := testwait.Deadline(10 * time.Second)
	for {
		if _, rest, ok := strings.Cut(out.String(), ListeningPrefix); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				// The whole banner is written at once.
				return line
			}
		}
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("nil error")
			}
			require.Failf(t, "run returned early", "%v", err)
		case <-time.After(10 * time.Millisecond):
		}
		require.False(t, time.Now().After(deadline), "no banner within %v", testwait.D(10*time.Second))
	}
}
