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
// A decision's only other error is the caller's context ending first,
// wrapping ctx.Err(). A store that fails is no error: the fallback or the
// policy's FailClosed decides, and Decision.Err says what went wrong (see
// Limiter). So "if err != nil { return err }" is right in every outage.
var ErrInvalidOption = errors.New("ratelimit: invalid argument")
