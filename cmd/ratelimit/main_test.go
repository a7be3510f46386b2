package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.csv")
	bad := filepath.Join(dir, "bad.csv")
	badJSON := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(good, []byte("0,a\n0.1,a\n0.2,a\n"), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("0,a\n0.1,a,x\n"), 0o600))
	require.NoError(t, os.WriteFile(badJSON, []byte(`{"t":0,"key":"a"}`+"\n"+`{"t":"later","key":"a"}`+"\n"), 0o600))
	pol := "--policy=alg=fixed,limit=2,window=1s"
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"no command", nil, exitUsage, "", "Usage: ratelimit"},
		{"unknown command", []string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{"help", []string{"help"}, exitOK, "Commands:", ""},
		{"help simulate", []string{"help", "simulate"}, exitOK, "Examples:", ""},
		{"help probe", []string{"help", "probe"}, exitOK, "Examples:", ""},
		{"probe --help", []string{"probe", "--help"}, exitOK, "\n  --max-wait duration\n", ""},
		{"simulate --help", []string{"simulate", "--help"}, exitOK, "\n  --pattern ", ""},
		{"openapi --help", []string{"openapi", "--help"}, exitOK, "\n  --layers file\n", ""},
		{"describe --help", []string{"describe", "--help"}, exitOK, "\n  --layers file\n", ""},
		{"probe without a URL", []string{"probe"}, exitUsage, "", "no URL given"},
		{"no policy", []string{"simulate", "--pattern", "steady"}, exitUsage, "", "--policy"},
		{"bad policy", []string{"simulate", "--policy", "alg=fixed", "--pattern", "steady"}, exitUsage, "", "limit"},
		{"no traffic", []string{"simulate", pol}, exitUsage, "", "exactly one of --trace and --pattern"},
		{"bad flag", []string{"simulate", "--nope"}, exitUsage, "", "-nope"},
		{"missing file", []string{"simulate", pol, "--trace", filepath.Join(dir, "none.csv")}, exitUsage, "", "none.csv"},
		{"bad csv", []string{"simulate", pol, "--trace", bad}, exitUsage, "", "bad.csv: line 2, column 7: cost"},
		{"bad jsonl", []string{"simulate", pol, "--trace", badJSON}, exitUsage, "", "bad.jsonl: line 2, column 2"},
		{"unknown pattern", []string{"simulate", pol, "--pattern", "zigzag"}, exitUsage, "", "zigzag"},
		{"good csv", []string{"simulate", pol, "--trace", good}, exitOK, "3 requests replayed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(c.args...)
			assert.Equal(t, c.code, code, stderr)
			assert.Contains(t, stdout, c.stdout)
			assert.Contains(t, stderr, c.stderr)
		})
	}
}

func TestSimulateJSON(t *testing.T) {
	code, stdout, stderr := runArgs("simulate", "--policy", "alg=all,limit=10,window=1s",
		"--pattern", "edge", "--burst", "10", "--period", "1s", "--duration", "3s", "--json")
	require.Equal(t, exitOK, code, stderr)
	var res []struct {
		Policy struct {
			Algorithm     string  `json:"algorithm"`
			Limit         int64   `json:"limit"`
			WindowSeconds float64 `json:"window_seconds"`
		} `json:"policy"`
		Offered            int64    `json:"offered"`
		Admitted           int64    `json:"admitted"`
		Denied             int64    `json:"denied"`
		Worst              int64    `json:"worst"`
		WorstWindowSeconds float64  `json:"worst_window_seconds"`
		FirstDenialSeconds *float64 `json:"first_denial_seconds"`
		Keys               []struct {
			Key                string   `json:"key"`
			FirstDenialSeconds *float64 `json:"first_denial_seconds"`
		} `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Len(t, res, 5)
	assert.Equal(t, "fixed_window", res[0].Policy.Algorithm)
	assert.Equal(t, int64(10), res[0].Policy.Limit)
	assert.Equal(t, 1.0, res[0].Policy.WindowSeconds, "seconds, not nanoseconds")
	assert.Equal(t, 1.0, res[0].WorstWindowSeconds)
	assert.Equal(t, int64(20), res[0].Worst)
	for _, r := range res {
		assert.Equal(t, r.Offered, r.Admitted+r.Denied)
		require.NotEmpty(t, r.Keys)
		assert.Equal(t, "attacker", r.Keys[0].Key)
		require.NotNil(t, r.FirstDenialSeconds, "the edge pattern is denied")
		assert.GreaterOrEqual(t, *r.FirstDenialSeconds, 0.0)
	}
	assert.NotContains(t, stdout, `"Window"`, "no Go field names")
	assert.NotContains(t, stdout, "-1", "no -1 for never")

	// A policy that denies nothing says null, not -1.
	code, stdout, stderr = runArgs("simulate", "--policy", "alg=fixed,limit=1000,window=1s", "--pattern", "steady", "--duration", "2s", "--json")
	require.Equal(t, exitOK, code, stderr)
	var calm []struct {
		Denied             int64    `json:"denied"`
		FirstDenialSeconds *float64 `json:"first_denial_seconds"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &calm))
	require.Len(t, calm, 1)
	assert.Zero(t, calm[0].Denied)
	assert.Nil(t, calm[0].FirstDenialSeconds)
	assert.Contains(t, stdout, `"first_denial_seconds": null`)
}

func TestSimulatePlotFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"out.svg", "out.png"} {
		path := filepath.Join(dir, name)
		code, _, stderr := runArgs("simulate", "--policy", "alg=all,limit=10,window=1s",
			"--pattern", "burst", "--burst", "30", "--period", "2s", "--duration", "6s", "--plot", path)
		require.Equal(t, exitOK, code, stderr)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		if filepath.Ext(name) == ".svg" {
			assert.Contains(t, string(b), "<svg")
			assert.Contains(t, string(b), "leaky_bucket")
		} else {
			assert.Equal(t, "\x89PNG", string(b[:4]))
		}
	}
	code, _, stderr := runArgs("simulate", "--policy", "alg=fixed,limit=10,window=1s", "--pattern", "steady", "--plot", filepath.Join(dir, "out.gif"))
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, ".svg or .png")
}

// TestSimulateProgress: nothing for the first two seconds, then at most a
// line a second, on stderr.
func TestSimulateProgress(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var stderr bytes.Buffer
	report := progress(&stderr, func() time.Time { return now })
	for _, step := range []struct {
		at   time.Duration
		done int
	}{{0, 0}, {1900 * time.Millisecond, 65536}, {2100 * time.Millisecond, 131072}, {2500 * time.Millisecond, 196608}, {3200 * time.Millisecond, 262144}} {
		now = t0.Add(step.at)
		report("fixed-window", step.done, 1_000_000)
	}
	assert.Equal(t, "simulate: fixed-window: 131072/1000000 requests (13%)\n"+
		"simulate: fixed-window: 262144/1000000 requests (26%)\n", stderr.String())
}

// TestHelpStyle: every command's help starts "Usage: ratelimit" and lists
// its flags with two dashes, as its text writes them.
func TestHelpStyle(t *testing.T) {
	for _, cmd := range []string{"simulate", "probe", "openapi", "describe"} {
		code, stdout, _ := runArgs(cmd, "--help")
		require.Equal(t, exitOK, code, cmd)
		assert.True(t, strings.HasPrefix(stdout, "Usage: ratelimit "+cmd), "%s: %.40q", cmd, stdout)
		assert.NotRegexp(t, `(?m)^  -[a-z]`, stdout, "%s: a flag listed with one dash", cmd)
		assert.Regexp(t, `(?m)^  --[a-z]`, stdout, "%s: no flag listed", cmd)
	}
}
