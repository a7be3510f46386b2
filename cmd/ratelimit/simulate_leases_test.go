package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimulateLeasesFlags: bad flags of simulate --leases are a usage
// error (exit 2) that names the flag.
func TestSimulateLeasesFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--nope"}, "-nope"},
		{"not a number", []string{"--servers", "many"}, "-servers"},
		{"no server", []string{"--servers", "0"}, "0 servers"},
		{"unknown algorithm", []string{"--alg", "fixed,log"}, "--alg log"},
		{"not an algorithm", []string{"--alg", "zigzag"}, "--alg"},
		{"lease past the window", []string{"--window", "1s", "--lease", "2s"}, "lease 2s is out of range"},
		{"no limit", []string{"--limit", "0"}, "--limit 0"},
		{"death after the end", []string{"--duration", "10s", "--die-at", "20s"}, "--die-at 20s"},
		{"all die", []string{"--die", "1"}, "die"},
		{"no demand", []string{"--demand", "0"}, "demand 0"},
		{"too many hot", []string{"--servers", "5", "--hot", "6"}, "6 hot servers"},
		{"argument", []string{"extra"}, `unexpected argument "extra"`},
		{"plot dir a file", []string{"--plot-dir", file}, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(append([]string{"simulate", "--leases"}, tc.args...)...)
			assert.Equal(t, exitUsage, code, stderr)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// TestSimulateLeasesRun: a small fleet's table, and its figures drawn.
func TestSimulateLeasesRun(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runArgs("simulate", "--servers", "10", "--hot", "2", "--limit", "60000", "--alg", "fixed,token",
		"--duration", "10s", "--die-at", "5s", "--move", "2s", "--plain", "1s", "--plot-dir", dir, "--leases")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"10 servers, demand 1.5", "fixed_window", "token_bucket", "60000/1m0s", "500ms", "600ms", "1500"} {
		assert.Contains(t, stdout, want)
	}
	for _, name := range []string{"leases-admitted.svg", "leases-store-ops.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(b), "<?xml"), name)
	}
	code, stdout, _ = runArgs("simulate", "--leases", "--help")
	assert.Equal(t, exitOK, code)
	assert.True(t, strings.HasPrefix(stdout, "Usage: ratelimit simulate --leases"))
	assert.Contains(t, stdout, "  --die-at")
}
