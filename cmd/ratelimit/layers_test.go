package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countsAndKeys is a layers file of what only a layers file's counts,
// user keys and short algorithm names say: failed logins, a limit per
// user (by address without one), and one per API key that counts what
// succeeds.
const countsAndKeys = `
layers:
  - name: login
    algorithm: fixed
    limit: 5
    window: 15m
    lockout: 30m
    counts: failures
    methods: [POST]
    routes: [/login]
  - name: user
    algorithm: token
    limit: 1000
    window: 1m
    key: user:user|ip
  - name: api
    algorithm: counter
    limit: 100
    window: 1h
    counts: successes
    key: header:X-API-Key
`

// TestLayersFileCountsAndKeys: a layers file with a login layer that
// counts failures, a per-user layer and a header-key layer, through
// describe and openapi. What they write names each layer and its key
// (a user's is "custom", as the openapi package tells a key it cannot
// name), the companion of the layer that counts successes, and what each
// layer that counts by the response counts.
func TestLayersFileCountsAndKeys(t *testing.T) {
	layers := writeFile(t, "layers.yaml", countsAndKeys)

	code, stdout, stderr := runArgs("describe", "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	assert.Empty(t, stderr)
	assert.Contains(t, stdout, "\n## POST /login\n")
	for _, row := range []string{
		"| login | fixed window | 5 per 15 minutes | - | 1 | `ip` | counts failures only; over it, locked out for 30m or more |",
		"| user | token bucket | 1000 per minute | 1000 | 1 | `custom` | - |",
		"| api | sliding window counter | 100 per hour | - | 1 | `header:X-Api-Key` | counts successes only |",
		"| api.failures | sliding window counter | 100 per hour | - | 1 | `header:X-Api-Key` | counts failures only |",
	} {
		assert.Contains(t, stdout, row)
	}

	code, stdout, stderr = runArgs("openapi", "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	doc := decodeDoc(t, []byte(stdout))
	assert.Equal(t, []any{
		map[string]any{"name": "login", "algorithm": "fixed_window", "limit": 5, "window": 900, "cost": 1, "key": "ip", "lockout": 1800, "counts": "failures"},
		map[string]any{"name": "user", "algorithm": "token_bucket", "limit": 1000, "window": 60, "burst": 1000, "cost": 1, "key": "custom"},
		map[string]any{"name": "api", "algorithm": "sliding_window_counter", "limit": 100, "window": 3600, "cost": 1, "key": "header:X-Api-Key", "counts": "successes"},
		map[string]any{"name": "api.failures", "algorithm": "sliding_window_counter", "limit": 100, "window": 3600, "cost": 1, "key": "header:X-Api-Key", "counts": "failures"},
	}, at(doc, "paths", "/login", "post", "x-ratelimit"))
}

// TestLayersFileErrors: a bad algorithm, counts mode or key exits 2, with
// a message naming the choices.
func TestLayersFileErrors(t *testing.T) {
	const algorithms = "want one of fixed_window (fixed), sliding_window_log (log), sliding_window_counter (counter), token_bucket (token), leaky_bucket (leaky)"
	for _, c := range []struct{ name, layer, stderr string }{
		{"unknown algorithm", "algorithm: gcra, limit: 1, window: 1s", `layers[0] "a": algorithm: unknown algorithm "gcra": ` + algorithms},
		{"empty algorithm", "algorithm: '', limit: 1, window: 1s", `layers[0] "a": algorithm: missing: ` + algorithms},
		{"unknown counts", "algorithm: fixed, limit: 1, window: 1s, counts: errors", `layers[0] "a": counts: unknown mode "errors" (want all, failures, successes, reported)`},
		{"bad key", "algorithm: fixed, limit: 1, window: 1s, key: user", `layers[0] "a": key "user": want ip, static, route, header:<Name>, user:<context key>, ` +
			"parts joined with + (route+ip), alternatives with | (user:<context key>|ip)"},
		{"key without a name", `algorithm: fixed, limit: 1, window: 1s, key: "user:"`, `key "user:": user:: no name after "user:"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			layers := writeFile(t, "layers.yaml", "layers:\n  - {name: a, "+c.layer+"}\n")
			for _, command := range []string{"describe", "openapi"} {
				code, stdout, stderr := runArgs(command, "--layers", layers)
				assert.Equal(t, exitUsage, code, command)
				assert.Empty(t, stdout, command)
				assert.Contains(t, stderr, c.stderr, command)
			}
		})
	}
}

// TestDocsLayersFile: the example layers file of docs/command.md, the
// README's layers, is described as written.
func TestDocsLayersFile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "command.md"))
	require.NoError(t, err)
	layers := fenced(t, string(doc), "<!-- the README's layers, as a layers file", "```yaml\n", "```\n")
	code, stdout, stderr := runArgs("describe", "--layers", writeFile(t, "layers.yaml", layers))
	require.Equal(t, exitOK, code, stderr)
	for _, row := range []string{
		"| global | token bucket | 1000000 per minute | 1000000 | 1 | `static` | - |",
		"| user | token bucket | 1000 per minute | 1000 | 1 | `custom` | - |",
		"| login | sliding window log | 5 per 15 minutes | - | 1 | `ip` | counts failures only; fails closed: 503 while the limiter is down |",
		"| ip | token bucket | 300 per minute | 300 | 1 | `ip` | - |",
	} {
		assert.Contains(t, stdout, row)
	}
}
