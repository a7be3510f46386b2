package core

import "errors"

// ErrInvalidOption reports bad input, and is the one sentinel error of the
// whole module: core, the stores, keyfuncs, httplimit and the adapters all
// wrap it. From a constructor it is a bad option or argument (a value out
// of range, a nil function or store, a Policy that Validate rejects); from a
// decision it is bad input (an empty key, a cost below 1 or above what the
// policy can ever admit, more Requests than layers). Such a call decided
// nothing.
//
// A decision returns only two kinds of error, and a non-nil error always
// means that nothing was decided: bad input, wrapping ErrInvalidOption, and
// the caller's own context ending first, wrapping ctx.Err()
// (context.Canceled or context.DeadlineExceeded). A store that fails is not
// such an error: the fallback store or the policy's FailClosed decides, the
// error is nil, and Decision.Err says what went wrong. So the idiomatic
//
//	d, err := l.AllowN(ctx, key, 1, time.Time{})
//	if err != nil {
//		return err // nothing was decided: the caller left, or a bug
//	}
//	if !d.Allowed { ... }
//
// is right in every outage: it fails open or closed as the policy says.
var ErrInvalidOption = errors.New("ratelimit: invalid argument")
