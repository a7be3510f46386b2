package redisbans

import "time"

// WithClock makes a Bans read this server's time from now, for tests.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}
