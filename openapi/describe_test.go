package openapi_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/npmtest"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/openapi"
)

// layeredFlow is a flow of four layers, as the examples' (a global
// bucket per IP, a login guard that fails closed) and more (an API key
// layer with a cost table, a per-route key), with every header family,
// problem details, a deny list and the quota endpoint.
func layeredFlow(t *testing.T, opts ...httplimit.Option) *httplimit.Flow {
	t.Helper()
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	ip, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	require.NoError(t, err)
	perRoute, err := keyfuncs.Compose(keyfuncs.Route(), ip.Key)
	require.NoError(t, err)
	petsCost, err := httplimit.CostByRoute(map[string]int64{"POST /pets": 5})
	require.NoError(t, err)
	searchCost, err := httplimit.CostByRoute(map[string]int64{"GET /search": 3})
	require.NoError(t, err)
	entry, err := access.ParseEntry("203.0.113.0/24")
	require.NoError(t, err)
	deny, err := access.NewList(entry)
	require.NoError(t, err)
	flow, err := httplimit.New(store, []httplimit.Layer{
		{Policy: core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20, Lease: 600 * time.Millisecond}},
		{Policy: core.Policy{Name: "pets", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute},
			Methods: []string{"GET", "POST"}, Routes: []string{"/pets", "/pets/:id"}, Cost: petsCost, Key: apiKey},
		{Policy: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute,
			Lockout: 30 * time.Minute, FailClosed: 5 * time.Second}, Methods: []string{"POST"}, Routes: []string{"/login"}},
		{Policy: core.Policy{Name: "search", Algorithm: core.LeakyBucket, Limit: 30, Window: time.Minute},
			Routes: []string{"/search"}, Cost: searchCost, Key: perRoute},
	}, append([]httplimit.Option{
		httplimit.WithQuota("/rate_limit"), httplimit.WithProblemDetails(), httplimit.WithDenyList(deny), httplimit.WithClientIP(ip),
		httplimit.WithHeaders(headers.Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}),
	}, opts...)...)
	require.NoError(t, err)
	return flow
}

// validate fails t unless doc is valid for swagger-parser.
func validate(t *testing.T, doc []byte) {
	t.Helper()
	out, err := npmtest.ValidateOpenAPI(t, doc)
	require.NoError(t, err, "document:\n%s", doc)
	t.Logf("swagger-parser %s: %s", npmtest.SwaggerParserVersion, strings.TrimSpace(out))
}

// decode decodes a YAML or JSON document into maps and lists.
func decode(t *testing.T, doc []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(doc, &m))
	return m
}

// dig returns the value at the keys of path in m, nil if there is none.
func dig(m any, path ...string) any {
	for _, k := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

// withoutLimits returns got less what Describe adds that orig does not
// have: x-ratelimit, the 429, 403 and 503 responses, the components of
// the package and the quota path.
func withoutLimits(got, orig map[string]any) map[string]any {
	paths, _ := got["paths"].(map[string]any)
	for path, item := range paths {
		if dig(orig, "paths", path) == nil {
			delete(paths, path)
			continue
		}
		for method, op := range item.(map[string]any) {
			op, ok := op.(map[string]any)
			if !ok || dig(op, "responses") == nil {
				continue
			}
			delete(op, "x-ratelimit")
			for _, status := range []string{"429", "403", "503"} {
				if dig(orig, "paths", path, method, "responses", status) == nil {
					delete(op["responses"].(map[string]any), status)
				}
			}
		}
	}
	components, _ := got["components"].(map[string]any)
	for section, named := range components {
		if dig(orig, "components", section) == nil {
			delete(components, section)
			continue
		}
		named, ok := named.(map[string]any)
		if !ok {
			continue // an extension
		}
		for name := range named {
			if dig(orig, "components", section, name) == nil {
				delete(named, name)
			}
		}
	}
	return got
}

// topKeys returns the top-level keys of a YAML or JSON document, in order.
func topKeys(t *testing.T, doc []byte) []string {
	t.Helper()
	var n yaml.Node
	require.NoError(t, yaml.Unmarshal(doc, &n))
	var keys []string
	for i := 0; i < len(n.Content[0].Content); i += 2 {
		keys = append(keys, n.Content[0].Content[i].Value)
	}
	return keys
}

// item is an x-ratelimit item as decoded.
func item(name, alg string, limit, window, burst, cost int, key string, extra ...any) map[string]any {
	m := map[string]any{"name": name, "algorithm": alg, "limit": limit, "window": window, "cost": cost, "key": key}
	if burst > 0 {
		m["burst"] = burst
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

var (
	global = item("global", "token_bucket", 100, 60, 20, 1, "ip", "lease", 0.6)
	login  = item("login", "sliding_window_log", 5, 900, 0, 1, "ip", "lockout", 1800, "fail_closed", 5)
)

// TestDescribeMergesIntoYAML merges the layered flow into a petstore in
// YAML (OpenAPI 3.1): the result is valid for swagger-parser, every path,
// operation, response, component and extension of the spec is still
// there unchanged, in its order and with its comments, and each limited
// operation has its limits and responses.
func TestDescribeMergesIntoYAML(t *testing.T) {
	spec, err := os.ReadFile("testdata/petstore.yaml")
	require.NoError(t, err)
	out, err := openapi.Describe(layeredFlow(t), spec)
	require.NoError(t, err)
	validate(t, out)

	text := string(out)
	assert.True(t, strings.HasPrefix(text, "# A petstore-like API, for the merge tests"), "the spec's comments are kept:\n%s", text)
	assert.Contains(t, text, "  description: |\n    A sample API that sells pets.\n", "and its block scalars")
	assert.Contains(t, text, "tags: [pets]", "and its flow style")
	assert.Equal(t, topKeys(t, spec), topKeys(t, out), "and its order")

	orig, got := decode(t, spec), decode(t, out)
	x := func(path, method string) any { return dig(got, "paths", path, method, "x-ratelimit") }
	pets := item("pets", "fixed_window", 10, 60, 0, 1, "header:X-Api-Key")
	petsPost := item("pets", "fixed_window", 10, 60, 0, 5, "header:X-Api-Key")
	assert.Equal(t, []any{global, pets}, x("/pets", "get"))
	assert.Equal(t, []any{global, petsPost}, x("/pets", "post"), "POST /pets costs 5 (CostByRoute)")
	assert.Equal(t, []any{global, pets}, x("/pets/{petId}", "get"), "/pets/:id matches the template /pets/{petId}")
	assert.Equal(t, []any{global}, x("/pets/{petId}", "delete"), "the pets layer is on GET and POST only")
	assert.Equal(t, []any{global, login}, x("/login", "post"))
	assert.Equal(t, []any{global}, x("/health", "get"))
	assert.Nil(t, dig(got, "webhooks", "newPet", "post", "x-ratelimit"), "webhooks are the API's requests, not its clients'")

	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/responses/" + name} }
	assert.Equal(t, ref("RateLimited"), dig(got, "paths", "/pets", "get", "responses", "429"))
	assert.Equal(t, ref("RateLimitForbidden"), dig(got, "paths", "/pets", "get", "responses", "403"), "the flow has a deny list")
	assert.Nil(t, dig(got, "paths", "/pets", "get", "responses", "503"), "no layer of GET /pets fails closed")
	assert.Equal(t, ref("RateLimitUnavailable"), dig(got, "paths", "/login", "post", "responses", "503"), "login fails closed")
	assert.Equal(t, map[string]any{"description": "The owner's own 429, kept as it is"},
		dig(got, "paths", "/pets/{petId}", "get", "responses", "429"), "the spec's own 429 is kept")

	limited := dig(got, "components", "responses", "RateLimited").(map[string]any)
	var fields []string
	for name, h := range limited["headers"].(map[string]any) {
		fields = append(fields, name)
		assert.Equal(t, map[string]any{"$ref": "#/components/headers/" + name}, h)
		assert.NotNil(t, dig(got, "components", "headers", name), name)
	}
	assert.ElementsMatch(t, []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
		"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit", "RateLimit-Policy", "Retry-After"}, fields)
	assert.Equal(t, "#/components/schemas/RateLimitError", dig(limited, "content", "application/json", "schema", "$ref"))
	assert.Equal(t, "#/components/schemas/ProblemDetails", dig(limited, "content", "application/problem+json", "schema", "$ref"))
	assert.Equal(t, "rate_limit_exceeded", dig(limited, "content", "application/json", "example", "error"))
	assert.NotNil(t, dig(got, "components", "schemas", "ProblemDetails", "properties", "violated-policies"))

	quota := dig(got, "paths", "/rate_limit", "get").(map[string]any)
	assert.Nil(t, quota["x-ratelimit"], "the quota endpoint spends nothing")
	assert.Equal(t, "#/components/schemas/RateLimitQuota", dig(quota, "responses", "200", "content", "application/json", "schema", "$ref"))
	assert.Equal(t, []any{"layers"}, dig(got, "components", "schemas", "RateLimitQuota", "required"))

	assert.Equal(t, orig, withoutLimits(got, orig), "nothing of the spec is lost or changed")
}

// TestDescribeMergesIntoJSON merges into an OpenAPI 3.0 document in JSON,
// and answers JSON: valid, the spec kept, its own Retry-After component
// used rather than replaced.
func TestDescribeMergesIntoJSON(t *testing.T) {
	spec, err := os.ReadFile("testdata/orders-3.0.json")
	require.NoError(t, err)
	out, err := openapi.Describe(layeredFlow(t), spec)
	require.NoError(t, err)
	require.True(t, json.Valid(out), "JSON in, JSON out:\n%s", out)
	assert.True(t, strings.HasPrefix(string(out), "{\n  \"openapi\": \"3.0.3\",\n  \"info\": {"), "in the spec's order:\n%s", out)
	assert.Contains(t, string(out), `"Orders & <their> lines"`, "no HTML escapes")
	validate(t, out)

	orig, got := decode(t, spec), decode(t, out)
	assert.Equal(t, "3.0.3", got["openapi"])
	assert.Equal(t, []any{global, item("search", "leaky_bucket", 30, 60, 30, 3, "route+ip")},
		dig(got, "paths", "/search", "get", "x-ratelimit"), "a leaky bucket's burst is its limit when 0; Compose(Route, ip)")
	assert.Equal(t, []any{global}, dig(got, "paths", "/orders/{id}", "get", "x-ratelimit"))
	assert.Equal(t, "The API's own Retry-After, kept", dig(got, "components", "headers", "Retry-After", "description"))
	assert.Equal(t, orig, withoutLimits(got, orig), "nothing of the spec is lost or changed")
}

// TestDescribeLeavesUnlimitedOperations: an operation no layer applies to
// gets nothing; without quota endpoint, lists or fail-closed layers,
// neither do the paths and components.
func TestDescribeLeavesUnlimitedOperations(t *testing.T) {
	store, err := memstore.New()
	require.NoError(t, err)
	defer store.Close()
	flow, err := httplimit.New(store, []httplimit.Layer{
		{Policy: core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}, Methods: []string{"POST"}, Routes: []string{"/login"}},
	})
	require.NoError(t, err)
	spec, err := os.ReadFile("testdata/petstore.yaml")
	require.NoError(t, err)
	out, err := openapi.Describe(flow, spec)
	require.NoError(t, err)
	orig, got := decode(t, spec), decode(t, out)
	assert.Equal(t, dig(orig, "paths", "/pets"), dig(got, "paths", "/pets"))
	assert.Equal(t, dig(orig, "paths", "/pets/{petId}"), dig(got, "paths", "/pets/{petId}"))
	assert.Equal(t, []any{item("login", "fixed_window", 5, 60, 0, 1, "ip")}, dig(got, "paths", "/login", "post", "x-ratelimit"))
	assert.Nil(t, dig(got, "paths", "/rate_limit"))
	assert.Nil(t, dig(got, "components", "responses", "RateLimitForbidden"))
	assert.Nil(t, dig(got, "components", "responses", "RateLimitUnavailable"))
	assert.ElementsMatch(t, []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
		"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"},
		keys(dig(got, "components", "responses", "RateLimited", "headers")), "the flow's default headers")
}

// keys returns the keys of a decoded mapping.
func keys(m any) []string {
	var out []string
	for k := range m.(map[string]any) {
		out = append(out, k)
	}
	return out
}

// TestDescribeWithoutSpec writes an OpenAPI 3.1 document of the layer
// routes, valid for swagger-parser.
func TestDescribeWithoutSpec(t *testing.T) {
	out, err := openapi.Describe(layeredFlow(t), nil)
	require.NoError(t, err)
	validate(t, out)
	got := decode(t, out)
	assert.Equal(t, "3.1.0", got["openapi"])
	assert.ElementsMatch(t, []string{"/", "/pets", "/pets/{id}", "/login", "/search", "/rate_limit"}, keys(got["paths"]))
	assert.Equal(t, []any{global}, dig(got, "paths", "/", "get", "x-ratelimit"), "a layer on every path is shown at /, under GET")
	assert.Equal(t, []any{global, login}, dig(got, "paths", "/login", "post", "x-ratelimit"))
	assert.NotNil(t, dig(got, "paths", "/pets", "post", "x-ratelimit"))
	assert.Equal(t, "id", dig(got, "paths", "/pets/{id}", "parameters").([]any)[0].(map[string]any)["name"])
}

// TestDescribeIsIdempotent: describing a described document changes
// nothing.
func TestDescribeIsIdempotent(t *testing.T) {
	flow := layeredFlow(t)
	for _, file := range []string{"testdata/petstore.yaml", "testdata/orders-3.0.json"} {
		spec, err := os.ReadFile(file)
		require.NoError(t, err)
		once, err := openapi.Describe(flow, spec)
		require.NoError(t, err)
		twice, err := openapi.Describe(flow, once)
		require.NoError(t, err)
		assert.Equal(t, string(once), string(twice), file)
	}
}

// TestDescribeBadSpecs: what is not an OpenAPI 3.0 or 3.1 document is an
// error that says why.
func TestDescribeBadSpecs(t *testing.T) {
	flow := layeredFlow(t)
	for _, c := range []struct{ name, spec, want string }{
		{"empty", "  \n", "the spec is empty"},
		{"not YAML", "openapi: [3.1.0\n", "neither YAML nor JSON"},
		{"not JSON", `{"openapi": "3.1.0",`, "neither YAML nor JSON"},
		{"a list", "- a\n- b\n", "top level is not a mapping"},
		{"swagger 2.0", "swagger: \"2.0\"\ninfo: {title: x, version: \"1\"}\npaths: {}\n", "Swagger 2.0: convert it"},
		{"no version", "info: {title: x, version: \"1\"}\npaths: {}\n", `no "openapi" field`},
		{"OpenAPI 4", "openapi: 4.0.0\ninfo: {title: x, version: \"1\"}\npaths: {}\n", `OpenAPI "4.0.0": want 3.0 or 3.1`},
		{"no info", "openapi: 3.1.0\npaths: {}\n", "not valid OpenAPI 3.1.0"},
		{"bad path", "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths:\n  pets:\n    get:\n      responses: {\"200\": {description: ok}}\n", "not valid OpenAPI 3.0.3"},
		{"external ref", "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths:\n  /pets:\n    get:\n      responses: {\"200\": {$ref: \"other.yaml#/Ok\"}}\n", "reading the spec"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openapi.Describe(flow, []byte(c.spec))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.True(t, strings.HasPrefix(err.Error(), "openapi: "), err.Error())
			_, err = openapi.Markdown(flow, []byte(c.spec))
			assert.ErrorContains(t, err, c.want, "Markdown reads the spec as Describe does")
		})
	}
	_, err := openapi.Describe(nil, nil)
	assert.EqualError(t, err, "openapi: nil flow")
}

// TestValidatorRejects: swagger-parser, as run here, is no rubber stamp.
func TestValidatorRejects(t *testing.T) {
	for _, doc := range []string{
		"openapi: 3.1.0\ninfo: {title: x, version: \"1\"}\npaths:\n  /pets:\n    get:\n      parameters: [{name: q, in: body}]\n      responses: {\"200\": {description: ok}}\n",
		"openapi: 3.0.3\ninfo: {title: x}\npaths: {}\n",
		"openapi: 3.1.0\ninfo: {title: x, version: \"1\"}\npaths:\n  /pets:\n    get:\n      responses: {\"429\": {$ref: \"#/components/responses/RateLimited\"}}\n",
	} {
		_, err := npmtest.ValidateOpenAPI(t, []byte(doc))
		assert.Error(t, err, doc)
	}
}

// TestDescribeCounts: a layer that counts by the response says which
// responses it counts, in x-ratelimit and in the Markdown page; a layer
// that counts every request says nothing.
func TestDescribeCounts(t *testing.T) {
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	p := func(name string) core.Policy {
		return core.Policy{Name: name, Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}
	}
	flow, err := httplimit.New(store, []httplimit.Layer{
		{Policy: p("global")},
		{Policy: p("login"), Counts: httplimit.CountFailures},
	})
	require.NoError(t, err)
	out, err := openapi.Describe(flow, nil)
	require.NoError(t, err)
	assert.Contains(t, string(out), "counts: failures")
	assert.Equal(t, 1, strings.Count(string(out), "counts:"), "only the login layer has counts")
	md, err := openapi.Markdown(flow, nil)
	require.NoError(t, err)
	assert.Contains(t, string(md), "counts failures only")
}
