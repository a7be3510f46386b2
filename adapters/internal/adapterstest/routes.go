package adapterstest

import (
	"strings"
	"testing"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// RunRouteKeys checks keyfuncs.Route: requests to one route share its
// pattern's bucket, and paths that match no route never get a bucket each.
func RunRouteKeys(t *testing.T, h Harness) {
	routes := []Route{{Method: "GET", Path: "/users/:id"}, {Method: "GET", Path: "/"}}
	paths := []string{"/users/1", "/users/2", "/users/3"}

	t.Run("limiter on the route", func(t *testing.T) {
		var log KeyLog
		l := NewLimiter(t, NewStore(t), fixed("route", 10))
		mount := NewMount(l, httplimit.WithKeyFunc(log.Wrap(keyfuncs.Route())))
		spec := &Spec{Routes: []Route{{Method: "GET", Path: "/users/:id", Limits: []Mount{mount}}}}
		app := h.Build(t, spec)
		for i, p := range paths {
			res := app.Do(t, Request{Method: "GET", Path: p, RemoteAddr: peerA})
			checkRemaining(t, p, res, 9-i)
		}
		want := "route:GET " + h.Pattern("/users/:id")
		for _, k := range log.Keys() {
			if k != want {
				t.Errorf("key %q, want %q", k, want)
			}
		}
	})

	t.Run("limiter for every request", func(t *testing.T) {
		var log KeyLog
		l := NewLimiter(t, NewStore(t), fixed("route", 100))
		spec := &Spec{
			Global: []Mount{NewMount(l, httplimit.WithKeyFunc(log.Wrap(keyfuncs.Route())))},
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
		for _, k := range keys {
			if k != want {
				t.Errorf("key %q, want %q", k, want)
			}
		}

		// Unknown paths never get a bucket of their own: each is keyed as
		// "unmatched" or, where the framework reports the nearest route
		// for a 404 (Echo does for /users/1/x), as a registered route.
		before := len(keys)
		unknown := []string{"/nope/1", "/nope/2", "/users/1/x", "/a/b/c/d"}
		for _, p := range unknown {
			app.Do(t, Request{Method: "GET", Path: p, RemoteAddr: peerA})
		}
		keys = log.Keys()[before:]
		if len(keys) != len(unknown) {
			t.Fatalf("%d keys for %d unknown paths: %q", len(keys), len(unknown), keys)
		}
		allowed := map[string]bool{"route:GET <unmatched>": true, want: true}
		for _, r := range routes {
			allowed["route:GET "+h.Pattern(r.Path)] = true
		}
		for i, k := range keys {
			if !allowed[k] || strings.Contains(k, unknown[i]) {
				t.Errorf("unknown path %s keyed %q", unknown[i], k)
			}
		}
		if keys[0] != keys[1] {
			t.Errorf("/nope/1 and /nope/2 keyed apart: %q, %q", keys[0], keys[1])
		}
		t.Logf("unknown paths keyed %q", keys)
	})
}

func checkRemaining(t *testing.T, path string, res Response, want int) {
	t.Helper()
	if res.Status != 200 {
		t.Errorf("%s: status %d", path, res.Status)
	}
	if got := res.Header.Get("X-Ratelimit-Remaining"); got != itoa(want) {
		t.Errorf("%s: X-RateLimit-Remaining %q, want %d: not one shared bucket", path, got, want)
	}
}
