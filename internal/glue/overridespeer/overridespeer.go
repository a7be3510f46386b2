// Package overridespeer lets package rediswatch reach unexported parts of an
// overrides.Set without widening the public API: the check that Put makes
// (an override's own values against the policies the Set has adjusted), a
// Replace without that check (for what a rediswatch.Overrides reads from Redis, which
// another writer may have written: the Set keeps it, and Adjust decides
// by the layer's last good override where it cannot apply), and the
// logger the Set reports such an override to. Package overrides sets the functions in its init; they take the Set
// and the Override as any, since this package cannot import overrides
// (overrides imports it).
package overridespeer

import "log/slog"

var (
	// Check reports whether set (an *overrides.Set) would take o (an
	// overrides.Override) for layer: set.Put's checks, without the change.
	Check func(set any, layer string, o any) error
	// Store is set.Replace(m) (m a map[string]overrides.Override) that
	// takes an override that cannot apply to a policy the Set knows.
	Store func(set any, m any) error
	// SetLogger makes set (an *overrides.Set) log to l.
	SetLogger func(set any, l *slog.Logger)
)

// Bounds of an override, which package overrides documents by value.
const (
	// MaxScale is the largest Override.Scale.
	MaxScale = 1e6
	// MaxTextLen is the longest text overrides.Parse reads.
	MaxTextLen = 256
)
