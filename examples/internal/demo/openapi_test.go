package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/npmtest"
	"github.com/apigate/ratelimit/openapi"
)

// TestOpenAPIOfTheExamples: the OpenAPI document of the examples' Flow,
// of its own and merged into the petstore sample, is valid for
// swagger-parser and has every layer where it applies; and the page of
// its limits is the one docs/openapi.md shows (which a test of the
// command checks against `ratelimit describe` of the layers file there).
func TestOpenAPIOfTheExamples(t *testing.T) {
	store, err := memstore.New()
	require.NoError(t, err)
	defer store.Close()
	l, err := NewLimiters(store, DefaultPolicies())
	require.NoError(t, err)
	flow, err := l.Flow(httplimit.WithSkip(SkipMetrics))
	require.NoError(t, err)

	doc, err := openapi.Describe(flow, nil)
	require.NoError(t, err)
	_, err = npmtest.ValidateOpenAPI(t, doc)
	require.NoError(t, err)
	var m struct {
		Paths map[string]map[string]any
	}
	require.NoError(t, yaml.Unmarshal(doc, &m))
	names := func(path, method string) []string {
		var out []string
		op, _ := m.Paths[path][method].(map[string]any)
		limits, _ := op["x-ratelimit"].([]any)
		for _, l := range limits {
			l := l.(map[string]any)
			out = append(out, l["name"].(string)+"/"+l["key"].(string))
		}
		return out
	}
	assert.Equal(t, []string{"global/ip"}, names("/", "get"))
	assert.Equal(t, []string{"global/ip", "login/ip"}, names("/login", "post"))
	assert.Equal(t, []string{"global/ip", "api/header:X-Api-Key"}, names("/api/data", "get"))
	assert.Equal(t, []string{"global/ip", "users/ip"}, names("/users/{id}", "get"))
	assert.Equal(t, []string{"global/ip", "posts/ip"}, names("/users/{id}/posts", "get"))
	assert.Contains(t, m.Paths, QuotaPath)

	spec, err := os.ReadFile(filepath.Join("..", "..", "..", "openapi", "testdata", "petstore.yaml"))
	require.NoError(t, err)
	merged, err := openapi.Describe(flow, spec)
	require.NoError(t, err)
	_, err = npmtest.ValidateOpenAPI(t, merged)
	require.NoError(t, err)

	page, err := openapi.Markdown(flow, nil)
	require.NoError(t, err)
	guide, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "openapi.md"))
	require.NoError(t, err)
	_, shown, ok := strings.Cut(string(guide), "<!-- ratelimit describe of the examples -->\n````markdown\n")
	require.True(t, ok, "docs/openapi.md shows the page of the examples' limits")
	shown, _, _ = strings.Cut(shown, "\n````\n")
	assert.Equal(t, shown+"\n", string(page), "docs/openapi.md shows the limits of the examples as they are")
}
