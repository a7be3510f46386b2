package core

import "time"

// HealthAt is Health at the time now, for the tests that drive a Limiter
// with AllowAt.
func (l *Limiter) HealthAt(now time.Time) Health { return l.health(now) }
