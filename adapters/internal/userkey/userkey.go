// Package userkey turns a user ID stored by a framework (gin's and echo's
// c.Get, fiber's Locals) into a rate-limit key, exactly as keyfuncs.User
// does for one found in a context.Context.
package userkey

import (
	"fmt"

	"github.com/apigate/ratelimit/keyfuncs"
)

// Key returns keyfuncs.UserKey(v) for a string v. No value (ok false, or v nil), or an empty or
// over-long ID, gives an error wrapping keyfuncs.ErrNoKey; a value that is
// not a string is a programming error, reported as such. where names the
// lookup for the error message (never the value).
func Key(v any, ok bool, where string) (string, error) {
	if !ok || v == nil {
		return "", fmt.Errorf("%w: no user in %s", keyfuncs.ErrNoKey, where)
	}
	id, isString := v.(string)
	if !isString {
		return "", fmt.Errorf("ratelimit: user in %s is a %T, not a string", where, v)
	}
	key, err := keyfuncs.UserKey(id)
	if err != nil {
		return "", fmt.Errorf("%w (in %s)", err, where)
	}
	return key, nil
}
