// Package hooks lets the module's tests and exporters reach what the
// public API does not show. It imports nothing of the module; core and the
// stores set or read its variables.
package hooks

import (
	"context"
	"time"
)

// AllowTimed is core.Limiter.AllowLayers by its layered path, which
// returns the time the store decided at whatever the Limiter, for
// httplimit's settling layers (AllowLayers's one-check shortcut does not
// when observers are on): limiter a *core.Limiter, checks a []core.Check,
// out a []core.Decision at least as long, d a *core.Decision for the
// request's decision. The time is zero unless the store decided. core
// sets it in its init.
var AllowTimed func(limiter any, ctx context.Context, checks, out, d any) (time.Time, error)
