package redisbans

import (
	"context"
	"time"
)

// WithClock makes a Bans read this server's time from now, for tests.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}

// Reload loads every ban in full now, as the poller does every resync
// interval, for benchmarks.
func Reload(ctx context.Context, b *Bans) error { return b.reload(ctx) }
