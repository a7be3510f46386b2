package layersfile_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/layersfile"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
)

// request is a keyfuncs.Request from 192.0.2.1, with the headers and
// context given.
type request struct {
	method, path string
	header       http.Header
	ctx          context.Context
}

func (r request) RemoteAddr() string                { return "192.0.2.1:1234" }
func (r request) Header(name string) string         { return r.header.Get(name) }
func (r request) HeaderValues(name string) []string { return r.header.Values(name) }
func (r request) Method() string                    { return r.method }
func (r request) Path() string                      { return r.path }
func (r request) Route() string                     { return r.path }
func (r request) Unrouted() bool                    { return false }
func (r request) Context() context.Context          { return r.ctx }

// typical is the README's setup: a global limit, one per user (by
// address for a client not signed in), failed logins, and an API key's.
const typical = `
layers:
  - {name: global, algorithm: token, limit: 1000000, window: 1m, key: static}
  - {name: user, algorithm: token_bucket, limit: 1000, window: 1m, key: "user:user|ip", costs: {GET /search: 5}}
  - {name: login, algorithm: fixed, limit: 5, window: 15m, lockout: 30m, lockout_max: 24h, lockout_memory: 48h, fail_closed: 5s,
     counts: failures, methods: [POST], routes: [/login]}
  - {name: api, algorithm: counter, limit: 100, window: 1h, key: header:X-API-Key, counts: successes}
  - {name: tokens, algorithm: leaky, limit: 100000, window: 1m, counts: reported, costs: {/*: 4000}, key: route+ip}
`

func TestParse(t *testing.T) {
	flow, err := layersfile.Parse([]byte(typical))
	require.NoError(t, err)
	layers := flow.Layers()
	var names []string
	for _, ly := range layers {
		names = append(names, ly.Policy.Name)
	}
	require.Equal(t, []string{"global", "user", "login", "api", "api.failures", "tokens"}, names, "api's companion after it")

	login := layers[2]
	assert.Equal(t, core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 5, Window: 15 * time.Minute, Lockout: 30 * time.Minute,
		LockoutMax: 24 * time.Hour, LockoutMemory: 48 * time.Hour, FailClosed: 5 * time.Second}, login.Policy)
	assert.Equal(t, []string{"POST"}, login.Methods)
	assert.Equal(t, []string{"/login"}, login.Routes)
	for i, want := range []httplimit.Counts{httplimit.CountAll, httplimit.CountAll, httplimit.CountFailures,
		httplimit.CountSuccesses, httplimit.CountFailures, httplimit.CountReported} {
		assert.Equal(t, want, layers[i].Counts, names[i])
	}
	assert.Equal(t, core.TokenBucket, layers[0].Policy.Algorithm)
	assert.Equal(t, core.SlidingWindowCounter, layers[3].Policy.Algorithm)
	assert.Equal(t, core.LeakyBucket, layers[5].Policy.Algorithm)

	key := func(i int, r request) string {
		t.Helper()
		if r.ctx == nil {
			r.ctx = context.Background()
		}
		if r.method == "" {
			r.method, r.path = http.MethodGet, "/search"
		}
		k, err := layers[i].Key(r)
		require.NoError(t, err, names[i])
		return k
	}
	assert.Equal(t, "static:global", key(0, request{}))
	//lint:ignore SA1029 a layers file names the context key by a string
	signedIn := context.WithValue(context.Background(), "user", "42")
	assert.Equal(t, "user:42", key(1, request{ctx: signedIn}), "the user in the context")
	assert.Equal(t, "ip:192.0.2.1", key(1, request{}), "no user: the address")
	assert.Equal(t, "ip:192.0.2.1", key(2, request{}), "no key: the flow's address")
	assert.Contains(t, key(3, request{header: http.Header{"X-Api-Key": {"k1"}}}), "key:")
	assert.Equal(t, "route:POST /chat|ip:192.0.2.1", key(5, request{method: http.MethodPost, path: "/chat"}))
	assert.Equal(t, int64(5), layers[1].Cost(request{method: http.MethodGet, path: "/search"}))
	assert.Equal(t, int64(4000), layers[5].Cost(request{method: http.MethodPost, path: "/chat"}), "the reserve")
}

func TestParseErrors(t *testing.T) {
	const layer = "layers:\n  - {name: a, algorithm: fixed, limit: 1, window: 1s, %s}\n"
	for _, c := range []struct{ name, file, err string }{
		{"empty", "", "empty layers file"},
		{"no layer", "quota: /q\n", "no layers"},
		{"unknown top field", "layer: []\n", "field layer not found"},
		{"empty algorithm", "layers:\n  - {name: a, algorithm: '', limit: 1, window: 1s}\n",
			`layers[0] "a": algorithm: missing: want one of ` + allAlgorithms},
		{"unknown algorithm", "layers:\n  - {name: a, algorithm: gcra, limit: 1, window: 1s}\n",
			`layers[0] "a": algorithm: unknown algorithm "gcra": want one of ` + allAlgorithms},
		{"misspelt field", "layers:\n  - {name: a, algoritm: fixed, limit: 1, window: 1s}\n",
			`layers[0] "a": unknown field "algoritm" (want name, algorithm, limit, window, burst, lockout, lockout_max, lockout_memory, fail_closed, lease, counts, key, methods, routes, costs)`},
		{"bad limit", "layers:\n  - {name: a, algorithm: fixed, limit: many, window: 1s}\n", `layers[0] "a": limit: "many" is not a whole number`},
		{"invalid policy", "layers:\n  - {name: a, algorithm: fixed, limit: 0, window: 1s}\n", `layers[0] "a": ratelimit: invalid argument`},
		{"unknown counts", fmt.Sprintf(layer, "counts: errors"), `layers[0] "a": counts: unknown mode "errors" (want all, failures, successes, reported)`},
		{"reported without costs", fmt.Sprintf(layer, "counts: reported"), "CountReported needs a Cost"},
		{"bad key", fmt.Sprintf(layer, "key: user"), `layers[0] "a": key "user": want ip, static, route, header:<Name>, user:<context key>, parts joined with + (route+ip), alternatives with | (user:<context key>|ip)`},
		{"key without a name", fmt.Sprintf(layer, `key: "header:"`), `key "header:": header:: no name after "header:"`},
		{"bad key part", fmt.Sprintf(layer, `key: "route+cookie"`), `key "route+cookie": want ip, static, route`},
		{"bad headers", "headers: [draft10]\n" + fmt.Sprintf(layer, "key: ip"), `headers: unknown family "draft10" (want x-ratelimit, draft6, structured, retry-after)`},
		{"bad deny", "deny: [nope]\n" + fmt.Sprintf(layer, "key: ip"), "deny:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := layersfile.Parse([]byte(c.file))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
}
