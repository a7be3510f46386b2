package keyfuncs

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type ctxKey struct{}

func TestUser(t *testing.T) {
	get := func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(ctxKey{}).(string)
		return id, ok
	}
	with := func(v any) *fakeRequest {
		return &fakeRequest{ctx: context.WithValue(context.Background(), ctxKey{}, v)}
	}
	cases := []struct {
		name string
		fn   Func
		req  *fakeRequest
		want string // "": an error wrapping ErrNoKey
	}{
		{"user", User(get), with("u-42"), "user:u-42"},
		{"odd bytes", User(get), with("a|b\x00\xff"), "user:a|b\x00\xff"},
		{"no user", User(get), &fakeRequest{}, ""},
		{"empty id", User(get), with(""), ""},
		{"at the cap", User(get), with(strings.Repeat("u", MaxUserIDLen)), "user:" + strings.Repeat("u", MaxUserIDLen)},
		{"over the cap", User(get), with(strings.Repeat("u", MaxUserIDLen+1)), ""},
		{"context value", ContextValue(ctxKey{}), with("u-42"), "user:u-42"},
		{"context value missing", ContextValue(ctxKey{}), &fakeRequest{}, ""},
		{"context value empty", ContextValue(ctxKey{}), with(""), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.req)
			if tc.want == "" {
				if got != "" || !errors.Is(err, ErrNoKey) {
					t.Fatalf("= %q, %v; want an error wrapping ErrNoKey", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestUserMisuse(t *testing.T) {
	r := &fakeRequest{ctx: context.WithValue(context.Background(), ctxKey{}, 42)}
	if _, err := ContextValue(ctxKey{})(r); err == nil || errors.Is(err, ErrNoKey) {
		t.Errorf("non-string value: err %v, want a programming error", err)
	}
	for name, fn := range map[string]Func{"nil getter": User(nil), "nil key": ContextValue(nil)} {
		if _, err := fn(r); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", name, err)
		}
	}
}
