package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/internal/testkit/npmtest"
)

// petstore is the openapi package's sample spec.
var petstore = filepath.Join("..", "..", "openapi", "testdata", "petstore.yaml")

// layersJSON are layers in JSON, with every field of the layers file.
const layersJSON = `{
  "quota": "/rate_limit",
  "headers": ["x-ratelimit", "structured", "retry-after"],
  "problem_details": true,
  "deny": ["203.0.113.0/24"],
  "layers": [
    {"name": "global", "algorithm": "token_bucket", "limit": 100, "window": "1m", "burst": 20},
    {"name": "pets", "algorithm": "fixed_window", "limit": 10, "window": "1m", "methods": ["GET", "POST"],
     "routes": ["/pets", "/pets/{id}"], "costs": {"POST /pets": 5}, "key": "header:X-API-Key"},
    {"name": "login", "algorithm": "sliding_window_log", "limit": 5, "window": "15m", "lockout": "30m",
     "fail_closed": "5s", "methods": ["POST"], "routes": ["/login"], "key": "static"}
  ]
}`

// writeFile writes data to name in a temporary directory, and returns its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(data), 0o600))
	return path
}

// decodeDoc decodes a YAML or JSON document.
func decodeDoc(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(doc, &m), "%s", doc)
	return m
}

// at returns the value at the keys of path in m.
func at(m any, path ...string) any {
	for _, k := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

// TestOpenAPICommand merges the layers of a JSON file into the petstore,
// to a file and to standard output, and writes a document of its own
// without --spec: each valid for swagger-parser, with the layers in it.
func TestOpenAPICommand(t *testing.T) {
	layers := writeFile(t, "layers.json", layersJSON)
	out := filepath.Join(t.TempDir(), "openapi.limits.yaml")
	code, stdout, stderr := runArgs("openapi", "--spec", petstore, "--layers", layers, "--out", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Empty(t, stdout)
	written, err := os.ReadFile(out)
	require.NoError(t, err)
	_, err = npmtest.ValidateOpenAPI(t, written)
	require.NoError(t, err)

	doc := decodeDoc(t, written)
	assert.Equal(t, "Petstore", at(doc, "info", "title"), "the spec's")
	assert.Equal(t, "listPets", at(doc, "paths", "/pets", "get", "operationId"))
	assert.Equal(t, []any{
		map[string]any{"name": "global", "algorithm": "token_bucket", "limit": 100, "window": 60, "burst": 20, "cost": 1, "key": "ip"},
		map[string]any{"name": "pets", "algorithm": "fixed_window", "limit": 10, "window": 60, "cost": 5, "key": "header:X-Api-Key"},
	}, at(doc, "paths", "/pets", "post", "x-ratelimit"))
	login := at(doc, "paths", "/login", "post", "x-ratelimit").([]any)
	require.Len(t, login, 2)
	assert.Equal(t, map[string]any{"name": "login", "algorithm": "sliding_window_log", "limit": 5, "window": 900,
		"cost": 1, "key": "static", "lockout": 1800, "fail_closed": 5}, login[1])
	for _, status := range []string{"429", "403", "503"} {
		assert.NotNil(t, at(doc, "paths", "/login", "post", "responses", status), status)
	}
	assert.ElementsMatch(t, []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit", "RateLimit-Policy", "Retry-After"},
		keysOf(at(doc, "components", "responses", "RateLimited", "headers")), "the headers of the file")
	assert.NotNil(t, at(doc, "components", "schemas", "ProblemDetails"))
	assert.NotNil(t, at(doc, "paths", "/rate_limit", "get"))

	code, stdout, stderr = runArgs("openapi", "--spec", petstore, "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, string(written), stdout, "standard output, when no --out")

	code, stdout, stderr = runArgs("openapi", "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	_, err = npmtest.ValidateOpenAPI(t, []byte(stdout))
	require.NoError(t, err)
	doc = decodeDoc(t, []byte(stdout))
	assert.Equal(t, "3.1.0", doc["openapi"])
	assert.ElementsMatch(t, []string{"/", "/pets", "/pets/{id}", "/login", "/rate_limit"}, keysOf(doc["paths"]))
}

// keysOf returns the keys of a decoded mapping.
func keysOf(m any) []string {
	var out []string
	for k := range m.(map[string]any) {
		out = append(out, k)
	}
	return out
}

// TestDescribeCommand writes the page of the limits of the petstore.
func TestDescribeCommand(t *testing.T) {
	layers := writeFile(t, "layers.json", layersJSON)
	code, stdout, stderr := runArgs("describe", "--spec", petstore, "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "# Rate limits of Petstore\n"), stdout)
	assert.Contains(t, stdout, "\n## POST /login\n")
	assert.Contains(t, stdout, "| login | sliding window log | 5 per 15 minutes | - | 1 | `static` |")
	assert.Contains(t, stdout, "| pets | fixed window | 10 per minute | - | 5 | `header:X-Api-Key` | - |", "POST /pets costs 5")
	assert.Contains(t, stdout, "A client on a deny list gets `403 Forbidden`.")
	assert.Contains(t, stdout, "`GET /rate_limit`")
}

// TestDescribeDefaultAlgorithm: a layer without an algorithm is described
// by the one the Limiter decides by, the sliding window counter.
func TestDescribeDefaultAlgorithm(t *testing.T) {
	layers := writeFile(t, "layers.yaml", "layers:\n  - {name: api, limit: 100, window: 1m}\n")
	code, stdout, stderr := runArgs("describe", "--spec", petstore, "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "| api | sliding window counter | 100 per minute |")
	code, stdout, stderr = runArgs("openapi", "--spec", petstore, "--layers", layers)
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, []any{map[string]any{"name": "api", "algorithm": "sliding_window_counter", "limit": 100, "window": 60, "cost": 1, "key": "ip"}},
		at(decodeDoc(t, []byte(stdout)), "paths", "/pets", "get", "x-ratelimit"))
}

// TestOpenAPICommandErrors: bad flags, layers and specs exit 2 and say
// what is wrong.
func TestOpenAPICommandErrors(t *testing.T) {
	good := writeFile(t, "layers.yaml", "layers:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n")
	layers := func(s string) string { return writeFile(t, "layers.yaml", s) }
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"help", []string{"openapi", "--help"}, exitOK, "-layers", ""},
		{"help describe", []string{"help", "describe"}, exitOK, "Markdown", ""},
		{"no layers", []string{"openapi"}, exitUsage, "", "no --layers file given"},
		{"argument", []string{"describe", "--layers", good, "extra"}, exitUsage, "", `unexpected argument "extra"`},
		{"missing layers", []string{"openapi", "--layers", "none.yaml"}, exitUsage, "", "none.yaml"},
		{"missing spec", []string{"openapi", "--layers", good, "--spec", "none.yaml"}, exitUsage, "", "none.yaml"},
		{"empty layers", []string{"openapi", "--layers", layers("")}, exitUsage, "", "empty layers file"},
		{"no layer", []string{"openapi", "--layers", layers("quota: /q\n")}, exitUsage, "", "no layers"},
		{"unknown field", []string{"openapi", "--layers", layers("layers:\n  - {name: a, algoritm: fixed_window}\n")}, exitUsage, "", `unknown field "algoritm" (want name, algorithm,`},
		{"unknown top field", []string{"openapi", "--layers", layers("layer: []\n")}, exitUsage, "", "field layer not found"},
		{"bad window", []string{"openapi", "--layers", layers("layers:\n  - {name: a, algorithm: fixed_window, limit: 1, window: soon}\n")}, exitUsage, "", "window: time: invalid duration"},
		{"bad cost", []string{"openapi", "--layers", layers("layers:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s, costs: {GET /x: 0}}\n")}, exitUsage, "", "costs:"},
		{"bad headers", []string{"openapi", "--layers", layers("headers: [draft10]\nlayers:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s}\n")}, exitUsage, "", `unknown family "draft10"`},
		{"bad route", []string{"openapi", "--layers", layers("layers:\n  - {name: a, algorithm: fixed_window, limit: 1, window: 1s, routes: [login]}\n")}, exitUsage, "", "does not start with '/'"},
		{"swagger spec", []string{"openapi", "--layers", good, "--spec", writeFile(t, "s.yaml", "swagger: \"2.0\"\n")}, exitUsage, "", "s.yaml: openapi: the spec is Swagger 2.0"},
		{"bad spec", []string{"describe", "--layers", good, "--spec", writeFile(t, "s.json", `{"openapi": "3.1.0"}`)}, exitUsage, "", "s.json: openapi: the spec is not valid OpenAPI 3.1.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(c.args...)
			assert.Equal(t, c.code, code, stderr)
			assert.Contains(t, stdout, c.stdout)
			assert.Contains(t, stderr, c.stderr)
		})
	}
}

// TestDocsDescribeOfTheExamples: docs/openapi.md shows the layers of the
// examples, and the page `ratelimit describe` writes of them: it is what
// the command writes now. (examples/internal/demo checks that the page is
// what openapi.Markdown writes of the examples' own Flow.)
func TestDocsDescribeOfTheExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.md"))
	require.NoError(t, err)
	layers := fenced(t, string(doc), "<!-- layers of the examples", "```yaml\n", "```\n")
	want := fenced(t, string(doc), "<!-- ratelimit describe of the examples -->", "````markdown\n", "````\n")
	code, stdout, stderr := runArgs("describe", "--layers", writeFile(t, "layers.yaml", layers))
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, want, stdout, "docs/openapi.md is out of date: write the yaml block to layers.yaml, "+
		"run `go run ./cmd/ratelimit describe --layers layers.yaml` and paste its output")
}

// fenced returns the text of the block that opens with open and closes
// with end, after the first line of doc that starts with marker.
func fenced(t *testing.T, doc, marker, open, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+marker)
	require.True(t, ok, "no %q in the doc", marker)
	_, rest, ok = strings.Cut(rest, "\n"+open)
	require.True(t, ok, "no %q block after %q", open, marker)
	block, _, ok := strings.Cut(rest, "\n"+end)
	require.True(t, ok, "the block after %q is not closed", marker)
	return block + "\n"
}
