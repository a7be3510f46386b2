// Package userkey turns a user ID into a rate-limit key, once for the whole
// module: keyfuncs.User uses it for an ID found in a context.Context, the
// adapters' User (ginlimit.User, fiberlimit.User,
// ...) for one their framework stores, so that
// every one of them keys a user alike and reports a missing user with the
// same sentinel, keyfuncs.ErrNoKey, defined here.
package userkey

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/apigate/ratelimit/core"
)

// ErrNoKey is keyfuncs.ErrNoKey: a request in which a key function found
// nothing to key on.
var ErrNoKey = errors.New("keyfuncs: no key in request")

// ErrIDType is wrapped by the error of a user ID stored as a type Value
// cannot key, and its text names the types it can; the whole error reads
// "keyfuncs: user in gin context key "user" is a float64, not a string, an
// integer or a fmt.Stringer". httplimit.LogErrors tells it by errors.Is,
// to log the first at Warn and later ones at Debug. It never wraps
// ErrNoKey, nor the reverse.
var ErrIDType = errors.New("not a string, an integer or a fmt.Stringer")

// MaxIDLen is the longest user ID, in bytes, that keyfuncs.User and the
// adapters' helpers accept (keyfuncs documents it); a longer one is no
// user.
const MaxIDLen = 512

// Lookup makes the keys of the user IDs found in one place (a context key,
// a framework's per-request store). Its ErrNoKey errors are made once, so
// that a request without a user, the common case in a keyfuncs.FirstOf
// chain, costs no allocation. The zero Lookup is not usable.
type Lookup struct {
	where      string // the place, for messages; never a value
	errNone    error
	errEmpty   error
	errTooLong error
}

// New returns the Lookup of IDs found in where ("context", "gin context
// key \"user\"").
func New(where string) Lookup {
	return Lookup{
		where:      where,
		errNone:    fmt.Errorf("%w: no user in %s", ErrNoKey, where),
		errEmpty:   fmt.Errorf("%w: empty user ID in %s", ErrNoKey, where),
		errTooLong: fmt.Errorf("%w: user ID in %s longer than %d bytes", ErrNoKey, where, MaxIDLen),
	}
}

// ID returns the key of id, "user:" followed by id, when found is true.
// No user (found false), an empty ID or an over-long one gives an error
// wrapping ErrNoKey.
func (l Lookup) ID(id string, found bool) (string, error) {
	switch {
	case !found:
		return "", l.errNone
	case id == "":
		return "", l.errEmpty
	case len(id) > MaxIDLen:
		return "", l.errTooLong
	}
	return "user:" + id, nil
}

// Value is ID for a value v as stored: a string, an integer (an auth
// middleware's numeric ID: c.Set("user", 42)) in decimal, or a
// fmt.Stringer (a UUID) by its String. A nil v is no user, and a v of
// another type is a programming error, reported as such: an error
// wrapping ErrIDType, not ErrNoKey, so that keyfuncs.FirstOf does not
// hide it.
func (l Lookup) Value(v any, found bool) (string, error) {
	if !found || v == nil {
		return "", l.errNone
	}
	var id string
	switch x := v.(type) {
	case string:
		id = x
	case int:
		id = strconv.FormatInt(int64(x), 10)
	case int64:
		id = strconv.FormatInt(x, 10)
	case int32:
		id = strconv.FormatInt(int64(x), 10)
	case uint:
		id = strconv.FormatUint(uint64(x), 10)
	case uint64:
		id = strconv.FormatUint(x, 10)
	case uint32:
		id = strconv.FormatUint(uint64(x), 10)
	case fmt.Stringer:
		id = x.String()
	default:
		return "", fmt.Errorf("keyfuncs: user in %s is a %T, %w", l.where, v, ErrIDType)
	}
	return l.ID(id, true)
}

// CheckKey returns an error wrapping core.ErrInvalidOption, naming the
// constructor fn, when key cannot be the key under which a user ID is
// stored: nil, "", or a value of a type that is not comparable (no lookup
// could ever match it, and a map lookup with it would panic).
func CheckKey(fn string, key any) error {
	switch {
	case key == nil:
		return fmt.Errorf("%w: %s: nil key", core.ErrInvalidOption, fn)
	case key == "":
		return fmt.Errorf("%w: %s: empty key", core.ErrInvalidOption, fn)
	case !reflect.TypeOf(key).Comparable():
		return fmt.Errorf("%w: %s: key of type %T is not comparable", core.ErrInvalidOption, fn, key)
	}
	return nil
}
