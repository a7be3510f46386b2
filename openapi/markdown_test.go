package openapi_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/openapi"
)

// TestMarkdown renders a table per limited operation of the spec, in the
// order of its paths and methods, and lists the operations with none.
func TestMarkdown(t *testing.T) {
	spec, err := os.ReadFile("testdata/orders-3.0.json")
	require.NoError(t, err)
	page, err := openapi.Markdown(layeredFlow(t), spec)
	require.NoError(t, err)
	text := string(page)
	assert.True(t, strings.HasPrefix(text, "# Rate limits of Orders\n\n"), text)
	assert.Contains(t, text, "`429 Too Many Requests` with `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`, "+
		"`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, `RateLimit`, `RateLimit-Policy`, `Retry-After`")
	assert.Contains(t, text, "(problem details, `application/problem+json`, to a client that asks for them)")
	assert.Contains(t, text, "A client on a deny list gets `403 Forbidden`.")
	assert.Contains(t, text, "`GET /rate_limit` tells a client where it stands")
	assert.Contains(t, text, "\n## GET /search\n\n| limit | algorithm | rate | burst | cost | key | notes |\n|---|---|---|---|---|---|---|\n"+
		"| global | token bucket | 100 per minute | 20 | 1 | `ip` | - |\n"+
		"| search | leaky bucket | 30 per minute | 30 | 3 | `route+ip` | - |\n")
	assert.Less(t, strings.Index(text, "## GET /orders\n"), strings.Index(text, "## GET /orders/{id}\n"))
	assert.Less(t, strings.Index(text, "## GET /orders/{id}\n"), strings.Index(text, "## GET /search\n"))
	assert.True(t, strings.HasSuffix(text, "|\n"), "one newline at the end")

	page, err = openapi.Markdown(layeredFlow(t), nil)
	require.NoError(t, err)
	text = string(page)
	assert.True(t, strings.HasPrefix(text, "# Rate limits\n\n"), text)
	assert.Contains(t, text, "| login | sliding window log | 5 per 15 minutes | - | 1 | `ip` | "+
		"over it, locked out for 30m or more; fails closed: 503 while the limiter is down |\n")
	assert.Contains(t, text, "\n## POST /pets\n")
}
