package sloglimit

import "time"

// SetClock makes the Logger sample by now instead of the monotonic
// clock, its zero at now's current reading. Call it before the Logger is
// given to a Limiter.
func (l *Logger) SetClock(now func() time.Time) {
	l.now = now
	l.epoch = now()
}

// SafeKey is safeKey, for the tests.
var SafeKey = safeKey
