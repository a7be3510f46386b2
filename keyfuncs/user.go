package keyfuncs

import (
	"context"
	"fmt"
)

// MaxUserIDLen is the longest user ID, in bytes, that User and
// ContextValue accept; a longer one is treated as no user.
const MaxUserIDLen = 512

// User returns a key function keying requests on the authenticated user:
// "user:" followed by the ID that get finds in the request's context.
// get is typically a getter your authentication middleware provides. A
// request for which get reports no user, or an empty or over-long
// ([MaxUserIDLen]) ID, gives an error wrapping [ErrNoKey], so that
// [FirstOf] can fall back to another key. The ID is used as it is; bytes
// the store cannot hold are the store's to hash.
func User(get func(ctx context.Context) (string, bool)) Func {
	if get == nil {
		return failing(fmt.Errorf("%w: User: nil getter", ErrInvalidOption))
	}
	errNoUser := fmt.Errorf("%w: no user in context", ErrNoKey)
	return func(r Request) (string, error) {
		id, ok := get(r.Context())
		if !ok {
			return "", errNoUser
		}
		return UserKey(id)
	}
}

// ContextValue returns a key function keying requests on the string
// stored in the request's context under key (as by context.WithValue):
// "user:" followed by the value, as [User] does. No value, or an empty or
// over-long one, gives an error wrapping [ErrNoKey]; a value that is not
// a string is a programming error, reported as such (not as ErrNoKey).
func ContextValue(key any) Func {
	if key == nil {
		return failing(fmt.Errorf("%w: ContextValue: nil key", ErrInvalidOption))
	}
	errNoValue := fmt.Errorf("%w: no value for %v in context", ErrNoKey, key)
	return func(r Request) (string, error) {
		v := r.Context().Value(key)
		if v == nil {
			return "", errNoValue
		}
		id, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("keyfuncs: context value for %v is a %T, not a string", key, v)
		}
		return UserKey(id)
	}
}

// UserKey is the key User gives the user ID id: "user:"+id, or an error
// wrapping [ErrNoKey] for an empty or over-long ([MaxUserIDLen]) ID.
// Adapters use it for IDs that their framework stores outside the context.
func UserKey(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty user ID", ErrNoKey)
	}
	if len(id) > MaxUserIDLen {
		return "", fmt.Errorf("%w: user ID longer than %d bytes", ErrNoKey, MaxUserIDLen)
	}
	return "user:" + id, nil
}
