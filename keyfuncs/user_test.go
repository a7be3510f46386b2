package keyfuncs

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/userkey"
)

type ctxKey struct{}

func TestUser(t *testing.T) {
	must := mustFunc(t)
	get := func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxKey{}).(string)
		return id, ok
	}
	with := func(v any) *fakeRequest {
		return &fakeRequest{ctx: context.WithValue(context.Background(), ctxKey{}, v)}
	}
	user, value := must(User(get)), must(ContextValue(ctxKey{}))
	cases := []struct {
		name string
		fn   Func
		req  *fakeRequest
		want string // "": an error wrapping ErrNoKey
	}{
		{"user", user, with("u-42"), "user:u-42"},
		{"odd bytes", user, with("a|b\x00\xff"), "user:a|b\x00\xff"},
		{"no user", user, &fakeRequest{}, ""},
		{"empty id", user, with(""), ""},
		{"at the cap", user, with(strings.Repeat("u", userkey.MaxIDLen)), "user:" + strings.Repeat("u", userkey.MaxIDLen)},
		{"over the cap", user, with(strings.Repeat("u", userkey.MaxIDLen+1)), ""},
		{"context value", value, with("u-42"), "user:u-42"},
		{"context value missing", value, &fakeRequest{}, ""},
		{"context value empty", value, with(""), ""},
		{"context value over the cap", value, with(strings.Repeat("u", userkey.MaxIDLen+1)), ""},
		//lint:ignore SA1029 some middlewares store the user under a string key
		{"string key", must(ContextValue("user")), &fakeRequest{ctx: context.WithValue(context.Background(), "user", "u-7")}, "user:u-7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.req)
			if tc.want == "" {
				require.ErrorIs(t, err, ErrNoKey)
				require.Empty(t, got, "key returned with an error")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestDocumentedBounds: the bounds the package documentation states. The
// adapters' helpers check user IDs in internal/userkey.
func TestDocumentedBounds(t *testing.T) {
	require.Equal(t, 512, userkey.MaxIDLen)
	require.Equal(t, 4096, maxAPIKeyLen)
	require.Equal(t, 1024, maxRouteLen)
}

func TestUserMisuse(t *testing.T) {
	r := &fakeRequest{ctx: context.WithValue(context.Background(), ctxKey{}, 42)}
	_, err := mustFunc(t)(ContextValue(ctxKey{}))(r)
	require.Error(t, err, "non-string value")
	assert.NotErrorIs(t, err, ErrNoKey, "a non-string value is a programming error, not a missing user")
	assert.ErrorContains(t, err, "int, not a string")
}

func TestUserBadInput(t *testing.T) {
	cases := map[string]func() (Func, error){
		"nil getter":           func() (Func, error) { return User(nil) },
		"nil key":              func() (Func, error) { return ContextValue(nil) },
		"empty key":            func() (Func, error) { return ContextValue("") },
		"non-comparable key":   func() (Func, error) { return ContextValue([]byte("user")) },
		"non-comparable key 2": func() (Func, error) { return ContextValue(map[string]int{}) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			fn, err := build()
			requireInvalid(t, fn, err)
		})
	}
}
