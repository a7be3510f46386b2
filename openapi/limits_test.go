package openapi

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/keyfuncs"
)

// TestKeyKind tells the key functions of keyfuncs apart, and calls what
// it cannot tell "custom".
func TestKeyKind(t *testing.T) {
	must := func(f keyfuncs.Func, err error) keyfuncs.Func {
		require.NoError(t, err)
		return f
	}
	ip, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	peer, err := keyfuncs.NewClientIP() // trusts no proxy: reads the forwarding headers, to report them
	require.NoError(t, err)
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	user := must(keyfuncs.User(func(context.Context) (string, bool) { return "", false }))
	for _, c := range []struct {
		name string
		key  keyfuncs.Func
		want string
	}{
		{"nil: the flow's address", nil, "ip"},
		{"ClientIP", ip.Key, "ip"},
		{"ClientIP of the socket peer", peer.Key, "ip"},
		{"Compose of a header and the socket peer", must(keyfuncs.Compose(must(keyfuncs.APIKeyHeader("X-API-Key", nil)), peer.Key)), "header:X-Api-Key+ip"},
		{"Static", must(keyfuncs.Static("all")), "static"},
		{"APIKeyHeader", must(keyfuncs.APIKeyHeader("x-api-key", []byte("secret"))), "header:X-Api-Key"},
		{"Bearer", must(keyfuncs.APIKeyHeader("Authorization", nil)), "header:Authorization"},
		{"Route", keyfuncs.Route(), "route"},
		{"Compose", must(keyfuncs.Compose(keyfuncs.Route(), ip.Key)), "route+ip"},
		{"User", user, "custom"},
		{"FirstOf", must(keyfuncs.FirstOf(user, ip.Key)), "custom"},
		{"FirstOf a header", must(keyfuncs.FirstOf(must(keyfuncs.APIKeyHeader("X-API-Key", nil)), ip.Key)), "custom"},
		{"own", func(r keyfuncs.Request) (string, error) { return "tenant:" + r.Header("X-Tenant"), nil }, "custom"},
		{"a panic", func(keyfuncs.Request) (string, error) { panic("no") }, "custom"},
	} {
		assert.Equal(t, c.want, keyKind(c.key), c.name)
	}
	assert.NotContains(t, logs.String(), "X-Forwarded-For", "a probe is no request from behind a proxy: nothing to report")
}

// TestCostOf: a cost function's answer, 1 for a panic or less than 1.
func TestCostOf(t *testing.T) {
	assert.Equal(t, int64(7), costOf(func(r keyfuncs.Request) int64 {
		if r.Method() == "POST" && r.Path() == "/x/{id}" && r.Route() == "/x/{id}" {
			return 7
		}
		return 1
	}, "POST", "/x/{id}"))
	assert.Equal(t, int64(1), costOf(func(keyfuncs.Request) int64 { return 0 }, "GET", "/"))
	assert.Equal(t, int64(1), costOf(func(keyfuncs.Request) int64 { panic("no") }, "GET", "/"))
}

// TestTemplate turns layer routes into path templates.
func TestTemplate(t *testing.T) {
	for route, want := range map[string]string{"/": "/", "/login": "/login", "/users/:id": "/users/{id}",
		"/users/{id}/posts": "/users/{id}/posts", "/api/*": "/api/{path}", "/files/*rest": "/files/{rest}"} {
		got, _ := template(route)
		assert.Equal(t, want, got, route)
	}
	_, params := template("/a/:x/b/{y}/*")
	assert.Equal(t, []string{"x", "y", "path"}, params)
}
