package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/gobuild"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestProbeTheExamples builds the four example programs of examples/, runs
// each as a process on a free loopback port with the memory store, and
// probes its GET / (the global limit: a token bucket of 20, refilled at 100
// a minute): 429s begin after the burst, the last 429's Retry-After is
// waited out and holds, and the fields agree with what happened (exit 0).
//
// The programs are built as this test binary was (gobuild: with -race
// under -race, sharing the packages the test run compiled), and probed at
// once, each in a subtest of its own.
func TestProbeTheExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example programs")
	}
	frameworks := []string{"chi", "echo", "gin", "fiber"}
	bin := t.TempDir()
	var pkgs []string
	for _, fw := range frameworks {
		pkgs = append(pkgs, "./examples/"+fw)
	}
	gobuild.Build(t, filepath.Join("..", ".."), bin+string(filepath.Separator), pkgs...)

	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			url := startExample(t, filepath.Join(bin, fw))
			// 200 a second, one at a time: the 25 requests take an eighth
			// of a second, and the bucket refills a token every 0.6s, so
			// the 5 past the burst are 429s, the last one included, unless
			// the machine is five times slower than that (at 50 a second,
			// the 25 took as long as one refill).
			code, rep, stderr := probeJSON(t, "--rate", "200", "--requests", "25", "--concurrency", "1", "--max-wait", "3s", url+"/")
			require.Equal(t, 0, code, "exit code; stderr: %s; report: %+v", stderr, rep)
			assert.Empty(t, rep.Disagreements)
			assert.Equal(t, 25, rep.Requests)
			assert.Zero(t, rep.Errors)
			assert.GreaterOrEqual(t, rep.Statuses["200"], 20, "the burst passes")
			assert.Positive(t, rep.Statuses["429"])
			require.NotNil(t, rep.FirstDenied, "429s began")
			assert.GreaterOrEqual(t, rep.FirstDenied.Request, 21, "not before the burst of 20 is spent")
			assert.Equal(t, []string{"X-RateLimit", "RateLimit (draft 6)", "Retry-After"}, rep.Families, "the adapters' default fields")
			require.NotNil(t, rep.RetryCheck, "the last request got 429: its Retry-After is checked")
			assert.True(t, rep.RetryCheck.Checked, "note: %s", rep.RetryCheck.Note)
			assert.Equal(t, 200, rep.RetryCheck.Status, "after Retry-After, the request passes")
		})
	}
}

// startExample runs the example program at path on a free loopback port
// with the memory store, until the test ends, and returns its base URL.
func startExample(t *testing.T, path string) string {
	t.Helper()
	var out lockedBuffer
	cmd := exec.Command(path)
	cmd.Env = append(environWithout("ADDR", "REDIS_URL"), "ADDR=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s said:\n%s", filepath.Base(path), out.String())
		}
	})
	const prefix = "listening on " // the examples' banner
	deadline := time.After(testwait.D(20 * time.Second))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, rest, ok := strings.Cut(out.String(), prefix); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				url := strings.TrimSpace(line)
				require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), "listens on %s, want loopback", url)
				return url
			}
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before listening: %s", filepath.Base(path), out.String())
		case <-deadline:
			t.Fatalf("%s did not say %q within 20s: %s", filepath.Base(path), prefix, out.String())
		case <-tick.C:
		}
	}
}

// environWithout returns the environment without the named variables.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			env = append(env, kv)
		}
	}
	return env
}

// lockedBuffer is a bytes.Buffer that a process writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
