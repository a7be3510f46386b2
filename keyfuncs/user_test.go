package keyfuncs

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/rules/userkey"
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
	user := must(User(get))
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
		{"not a string", user, with(42), ""}, // the getter's to convert; it reports no user
		{"found but empty", must(User(func(context.Context) (string, bool) { return "", true })), &fakeRequest{}, ""},
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
// adapters' helpers check user IDs in internal/rules/userkey.
func TestDocumentedBounds(t *testing.T) {
	require.Equal(t, 512, userkey.MaxIDLen)
	require.Equal(t, 4096, maxAPIKeyLen)
	require.Equal(t, 1024, maxRouteLen)
}

func TestUserBadInput(t *testing.T) {
	cases := map[string]func() (Func, error){
		"nil getter": func() (Func, error) { return User(nil) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			fn, err := build()
			requireInvalid(t, fn, err)
		})
	}
}
