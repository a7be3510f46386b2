package core

import "time"

// HealthAt is Health at the time now, for the tests that drive a Limiter
// with AllowAt.
func (l *Limiter) HealthAt(now time.Time) Health { return l.health(now) }

// Partitions returns how many partitions' breakers the Limiter keeps.
func (l *Limiter) Partitions() int {
	if l.parts == nil {
		return 0
	}
	return len(*l.parts.m.Load())
}

// LeasedKeys returns how many keys layer i's leases are held for (0 for
// a layer not leased).
func (l *Limiter) LeasedKeys(i int) int64 {
	if l.leased == nil || l.leased[i] == nil {
		return 0
	}
	return l.leased[i].n.Load()
}
