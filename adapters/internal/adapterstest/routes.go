package adapterstest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// RunRouteKeys checks keyfuncs.Route: requests to one route share its
// pattern's bucket, and paths that match no route never get a bucket each.
func RunRouteKeys(t *testing.T, h Harness) {
	routes := []Route{{Method: "GET", Path: "/users/:id"}, {Method: "GET", Path: "/"}}
	paths := []string{"/users/1", "/users/2", "/users/3"}

	t.Run("limiter on the route", func(t *testing.T) {
		var log KeyLog
		mount := NewMount(t, clockstore.At(NewStore(t), T0), httplimit.Layer{Policy: fixed("route", 10), Key: log.Wrap(keyfuncs.Route())}, nil)
		spec := &Spec{Routes: []Route{{Method: "GET", Path: "/users/:id", Limits: []Mount{mount}}}}
		app := h.Build(t, spec)
		for i, p := range paths {
			res := app.Do(t, Request{Method: "GET", Path: p, RemoteAddr: peerA})
			checkRemaining(t, p, res, 9-i)
		}
		want := "route:GET " + h.Pattern("/users/:id")
		assert.Equal(t, []string{want, want, want}, log.Keys(), "keys")
	})

	t.Run("limiter for every request", func(t *testing.T) {
		var log KeyLog
		spec := &Spec{
			Global: []Mount{NewMount(t, clockstore.At(NewStore(t), T0), httplimit.Layer{Policy: fixed("route", 100), Key: log.Wrap(keyfuncs.Route())}, nil)},
			Routes: routes,
		}
		app := h.Build(t, spec)
		for i, p := range paths {
			res := app.Do(t, Request{Method: "GET", Path: p, RemoteAddr: peerA})
			if h.UseSeesRoute() {
				checkRemaining(t, p, res, 99-i)
			}
		}
		keys := log.Keys()
		want := "route:GET " + h.Pattern("/users/:id")
		if !h.UseSeesRoute() {
			want = "route:GET /" // documented: the Use prefix
		}
		assert.Equal(t, []string{want, want, want}, keys, "keys")

		// Unknown paths never get a bucket of their own: each is keyed as
		// "unmatched" or, where the framework reports the nearest route
		// for a 404 (Echo does for /users/1/x), as a registered route.
		before := len(keys)
		unknown := []string{"/nope/1", "/nope/2", "/users/1/x", "/a/b/c/d"}
		for _, p := range unknown {
			app.Do(t, Request{Method: "GET", Path: p, RemoteAddr: peerA})
		}
		keys = log.Keys()[before:]
		require.Len(t, keys, len(unknown), "keys of the unknown paths: %q", keys)
		allowed := []string{"route:GET <unmatched>", want}
		for _, r := range routes {
			allowed = append(allowed, "route:GET "+h.Pattern(r.Path))
		}
		for i, k := range keys {
			assert.Contains(t, allowed, k, "the key of unknown path %s", unknown[i])
			assert.NotContains(t, k, unknown[i], "the key of unknown path %s", unknown[i])
		}
		assert.Equal(t, keys[0], keys[1], "/nope/1 and /nope/2 keyed apart")
		t.Logf("unknown paths keyed %q", keys)
	})
}

func checkRemaining(t *testing.T, path string, res Response, want int) {
	t.Helper()
	assert.Equal(t, 200, res.Status, "%s: status", path)
	assert.Equal(t, itoa(want), res.Header.Get("X-Ratelimit-Remaining"), "%s: X-RateLimit-Remaining: one shared bucket", path)
}
