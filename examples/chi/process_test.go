//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/gobuild"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestProcess builds the chi example, runs it as a process on a free
// loopback port with the memory store and a deny list file that does not
// list it, drives its global limit from 200 to 429, finds those decisions
// at GET /metrics and stops it with SIGTERM, expecting a graceful exit
// with status 0, the deny list's watch closed.
func TestProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example binary")
	}
	// Built as this test binary was (gobuild: with -race under -race,
	// sharing the packages the test run compiled).
	bin := filepath.Join(t.TempDir(), "chi-example")
	gobuild.Build(t, ".", bin, ".")

	deny := filepath.Join(t.TempDir(), "deny.txt")
	require.NoError(t, os.WriteFile(deny, []byte("192.0.2.0/24 reason=not the test\n"), 0o600))

	var out syncBuffer
	cmd := exec.Command(bin)
	// ADDR=127.0.0.1:0: the kernel picks a free port, which the banner
	// tells; no REDIS_URL: the memory store.
	cmd.Env = append(environWithout("ADDR", "REDIS_URL", demo.DenyFileEnv), "ADDR=127.0.0.1:0", demo.DenyFileEnv+"="+deny)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start(), "starting the example")
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("example output:\n%s", out.String())
		}
	})

	base := waitForURL(t, &out, exited, 20*time.Second)
	require.True(t, strings.HasPrefix(base, "http://127.0.0.1:"), "the example listens on %s, want loopback", base)
	assert.Contains(t, out.String(), "store: memory", "the banner names the store")
	assert.Contains(t, out.String(), "deny list: "+deny+" (1 entry; reloaded when it changes)", "the banner names the deny list")

	client := &http.Client{Timeout: testwait.D(2 * time.Second)}
	global := demo.DefaultPolicies().Global
	capacity := limits.Capacity(global.Algorithm, global.Limit, global.Burst)
	var passed int64
	var denied *http.Response
	var deniedBody []byte
	for i := int64(0); i < capacity+50 && denied == nil; i++ {
		res, err := client.Get(base + "/")
		require.NoError(t, err, "GET / #%d", i+1)
		body, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		require.NoError(t, err, "GET / #%d: reading the body", i+1)
		switch res.StatusCode {
		case http.StatusOK:
			passed++
		case http.StatusTooManyRequests:
			denied, deniedBody = res, body
		default:
			t.Fatalf("GET / #%d: status %d; body %s", i+1, res.StatusCode, body)
		}
	}
	require.NotNil(t, denied, "%d requests passed, none was denied", passed)
	// The bucket refills one token every 600ms: a slow run may pass a few
	// more than the burst, never fewer.
	assert.GreaterOrEqual(t, passed, capacity, "requests passed before the first 429: at least the burst")
	assert.NotEmpty(t, denied.Header.Get("Retry-After"), "the 429's Retry-After")
	var body struct{ Error string }
	if assert.NoError(t, json.Unmarshal(deniedBody, &body), "429 body %s", deniedBody) {
		assert.Equal(t, "rate_limit_exceeded", body.Error, "the 429 body's error")
	}

	// What Prometheus would scrape: every request above counted under
	// the global limit, the scrape itself neither limited nor counted.
	for range 2 {
		res, err := client.Get(base + demo.MetricsPath)
		require.NoError(t, err, "GET /metrics")
		metrics, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		require.NoError(t, err, "GET /metrics: reading the body")
		require.Equal(t, http.StatusOK, res.StatusCode, "GET /metrics: %s", metrics)
		assert.Empty(t, res.Header.Get("X-RateLimit-Limit"), "GET /metrics is not limited")
		for _, line := range []string{
			fmt.Sprintf(`ratelimit_decisions_total{limit="global",outcome="allowed"} %d`, passed),
			`ratelimit_decisions_total{limit="global",outcome="denied"} 1`,
			`ratelimit_store_health{limit="global",state="healthy"} 1`,
			`ratelimit_memstore_keys{store="memory"} 1`,
		} {
			assert.Contains(t, "\n"+string(metrics), "\n"+line+"\n", "GET /metrics")
		}
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM), "SIGTERM")
	select {
	case <-exited:
	case <-time.After(demo.ShutdownTimeout + testwait.D(5*time.Second)):
		require.Fail(t, "the example did not exit after SIGTERM")
	}
	assert.NoError(t, waitErr, "the example's exit: want status 0")
	assert.Contains(t, out.String(), "stopped", "the example reports a graceful stop")
}

// TestProcessMalformedDenyFile runs the chi example with DENY_FILE naming
// a file whose third line is malformed: it must exit with status 1 before
// listening, saying which variable, file and line.
func TestProcessMalformedDenyFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "chi-example")
	gobuild.Build(t, ".", bin, ".") // as TestProcess builds it
	deny := filepath.Join(dir, "deny.txt")
	require.NoError(t, os.WriteFile(deny, []byte("# blocked\n203.0.113.7\n10.1.2.3/8\n"), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(30*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(environWithout("ADDR", "REDIS_URL", demo.DenyFileEnv), "ADDR=127.0.0.1:0", demo.DenyFileEnv+"="+deny)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the example must fail; stdout %s", stdout.String())
	assert.Equal(t, 1, exit.ExitCode(), "exit status")
	assert.Contains(t, stderr.String(), "chi example: DENY_FILE: ", "stderr names the variable")
	assert.Contains(t, stderr.String(), deny+": line 3, column 1: ", "stderr names the file and the line")
	assert.NotContains(t, stdout.String(), demo.ListeningPrefix, "it never listened")
}

// waitForURL waits, at most testwait.D(timeout), for the banner line giving the
// server's URL, and returns the URL.
func waitForURL(t *testing.T, out *syncBuffer, exited <-chan struct{}, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(testwait.D(timeout))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s := out.String()
		if _, rest, ok := strings.Cut(s, demo.ListeningPrefix); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				return strings.TrimSpace(line)
			}
		}
		select {
		case <-exited:
			t.Fatal("the example exited before listening")
		case <-deadline:
			t.Fatalf("the example did not print %q within %v", demo.ListeningPrefix, testwait.D(timeout))
		case <-tick.C:
		}
	}
}

// environWithout returns the environment without the named variables.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if name == n {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// syncBuffer is a log or output destination one goroutine writes while
// another reads it.
type syncBuffer = syncbuf.Buffer
