package keyfuncs

import (
	"context"
	"fmt"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/userkey"
)

// User returns a key function keying requests on the authenticated user:
// "user:" followed by the ID that get finds in the request's context.
// get is typically a getter your authentication middleware provides. A
// request for which get reports no user, or an empty or over-long
// (512 bytes) ID, gives an error wrapping [ErrNoKey], so that
// [FirstOf] can fall back to another key. The ID is used as it is; bytes
// the store cannot hold are the store's to hash. A nil get is an error.
//
// A user your framework stores its own way (gin's and echo's c.Set,
// fiber's Locals) is found by that adapter's User instead:
// ginlimit.User("user"), and so on.
func User(get func(ctx context.Context) (string, bool)) (Func, error) {
	if get == nil {
		return nil, fmt.Errorf("%w: keyfuncs.User: nil getter", core.ErrInvalidOption)
	}
	users := userkey.New("context")
	return func(r Request) (string, error) {
		return users.ID(get(r.Context()))
	}, nil
}
