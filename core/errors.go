package core

import (
	"errors"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// ErrInvalidOption reports bad input: core, the stores, keyfuncs,
// httplimit and the adapters all wrap it. From a constructor it is a bad
// option or argument (a value out of range, a nil function or store, a
// Policy that Validate rejects); from a decision it is bad input (an empty
// key, a cost below 1 or above what the policy can ever admit, more
// Requests than layers). Such a call decided nothing.
//
// A decision's only other error is the caller's context ending first,
// wrapping ctx.Err(). A store that fails is no error: the fallback or the
// policy's FailClosed decides, and Decision.Err says what went wrong (see
// Limiter and ErrStore). So "if err != nil { return err }" is right in
// every outage.
var ErrInvalidOption = errors.New("ratelimit: invalid argument")

// ErrStore is wrapped by the Decision.Err of every decision the store did
// not make: it failed or timed out (its error is wrapped too), or it was
// not asked, its circuit breaker open. The fallback or the policy's
// FailClosed decided instead. An ErrorHandler tells an outage from a
// client's mistake with errors.Is(err, core.ErrStore).
var ErrStore = limits.ErrStore
