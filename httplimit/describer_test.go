package httplimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// An external describer: a Markdown table of the limits on each of an
// API's operations, written against httplimit's public API only, as a
// team would write one for its own documentation format. It proves that
// what package openapi reads of a Flow is open to every package.

// operation is a keyfuncs.Request of a method and a route template, all
// that a layer's Methods and Routes look at.
type operation struct{ method, path string }

func (o operation) RemoteAddr() string                         { return "192.0.2.1:1234" }
func (o operation) Header(string) string                       { return "" }
func (o operation) HeaderValues(string) []string               { return nil }
func (o operation) Method() string                             { return o.method }
func (o operation) Route() string                              { return o.path }
func (operation) Unrouted() bool                               { return false }
func (o operation) Path() string                               { return o.path }
func (o operation) Context() context.Context                   { return context.Background() }
func (o operation) String() string                             { return o.method + " " + o.path }
func (o operation) cost(fn func(keyfuncs.Request) int64) int64 { return fn(o) }

// markdown describes the limits f applies to each of ops.
func markdown(f *httplimit.Flow, ops []operation) string {
	var b strings.Builder
	b.WriteString("| operation | limit | cost |\n|---|---|---|\n")
	layers := f.Layers()
	for _, op := range ops {
		for i, ly := range layers {
			if !f.Applies(i, op) {
				continue
			}
			cost := int64(1)
			if ly.Cost != nil {
				cost = op.cost(ly.Cost)
			}
			fmt.Fprintf(&b, "| %s | %s: %d per %s | %d |\n", op, ly.Policy.Name, ly.Policy.Limit, ly.Policy.Window, cost)
		}
	}
	var notes []string
	if h := f.Headers(); h.RetryAfter {
		notes = append(notes, "429s carry Retry-After")
	}
	if f.ProblemDetails() {
		notes = append(notes, "problem details on request")
	}
	if f.Lists() {
		notes = append(notes, "deny-listed clients get 403")
	}
	if q := f.Quota(); q != "" {
		notes = append(notes, "quota at GET "+q)
	}
	b.WriteString("\n" + strings.Join(notes, "; ") + "\n")
	return b.String()
}

func TestExternalDescriber(t *testing.T) {
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	ip := clientIPKey(t)
	search, err := httplimit.CostByRoute(map[string]int64{"/search": 5})
	require.NoError(t, err)
	f, err := httplimit.New(store, []httplimit.Layer{
		{Policy: core.Policy{Name: "all", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute}, Key: ip, Cost: search},
		{Policy: core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 5, Window: 15 * time.Minute},
			Methods: []string{"post"}, Routes: []string{"/login", "/users/{id}/password"}, Key: ip},
	}, httplimit.WithHeaders(headers.Config{XRateLimit: true, RetryAfter: true}), httplimit.WithQuota("/rate_limit"))
	require.NoError(t, err)

	got := markdown(f, []operation{{"GET", "/search"}, {"POST", "/login"}, {"GET", "/login"}, {"POST", "/users/{id}/password"}})
	assert.Equal(t, `| operation | limit | cost |
|---|---|---|
| GET /search | all: 100 per 1m0s | 5 |
| POST /login | all: 100 per 1m0s | 1 |
| POST /login | login: 5 per 15m0s | 1 |
| GET /login | all: 100 per 1m0s | 1 |
| POST /users/{id}/password | all: 100 per 1m0s | 1 |
| POST /users/{id}/password | login: 5 per 15m0s | 1 |

429s carry Retry-After; quota at GET /rate_limit
`, got)

	// What it reads is a copy: changing it changes nothing of the Flow.
	layers := f.Layers()
	layers[1].Methods[0] = "GET"
	layers[1].Routes[0] = "/other"
	assert.Equal(t, []string{"POST"}, f.Layers()[1].Methods)
	assert.Equal(t, "/login", f.Layers()[1].Routes[0])
	assert.False(t, f.Applies(2, operation{"GET", "/"}), "no layer 2")
	assert.False(t, f.Applies(-1, operation{"GET", "/"}))
}
