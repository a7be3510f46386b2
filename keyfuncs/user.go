package keyfuncs

import (
	"context"
	"fmt"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/userkey"
)

// User returns a key function keying requests on the authenticated user:
// "user:" followed by the ID that get finds in the request's context.
// get is typically a getter your authentication middleware provides. A
// request for which get reports no user, or an empty or over-long
// (512 bytes) ID, gives an error wrapping [ErrNoKey], so that
// [FirstOf] can fall back to another key. The ID is used as it is; bytes
// the store cannot hold are the store's to hash. A nil get is an error.
func User(get func(ctx context.Context) (string, bool)) (Func, error) {
	if get == nil {
		return nil, fmt.Errorf("%w: keyfuncs.User: nil getter", core.ErrInvalidOption)
	}
	users := userkey.New("context")
	return func(r Request) (string, error) {
		return users.ID(get(r.Context()))
	}, nil
}

// ContextValue returns a key function keying requests on the string
// stored in the request's context under key (as by context.WithValue):
// "user:" followed by the value, as [User] does. No value, or an empty or
// over-long one, gives an error wrapping [ErrNoKey]; a value that is not
// a string is a programming error, reported as such (not as ErrNoKey).
// A nil or empty key, or one of a type that is not comparable, is an
// error.
func ContextValue(key any) (Func, error) {
	if err := userkey.CheckKey("keyfuncs.ContextValue", key); err != nil {
		return nil, err
	}
	users := userkey.New(fmt.Sprintf("context key %#v", key))
	return func(r Request) (string, error) {
		return users.Value(r.Context().Value(key), true)
	}, nil
}
