package memstore

import "time"

// clock is a Store's wall clock: the wall time at New plus the monotonic
// time elapsed since. It reads one clock (time.Since reads only the
// monotonic one) instead of the two that time.Now reads, which halves its
// cost, and a wall-clock step (an NTP correction, an operator's date
// command) cannot move it: windows and buckets keep aging at the real rate.
// Decisions only carry durations, so a store whose clock drifts from the
// wall clock after a step still tells clients the truth.
type clock struct {
	base   time.Time // carries a monotonic reading
	baseUS int64     // base in µs since the Unix epoch
}

func newClock() clock {
	base := time.Now()
	return clock{base: base, baseUS: base.UnixMicro()}
}

// now returns the time in µs since the Unix epoch.
func (c clock) now() int64 {
	return c.baseUS + time.Since(c.base).Microseconds()
}

// at returns the time us, a reading of now, as a time.Time that carries
// the monotonic reading it was made from: its wall time is the store's
// (base's, plus the time elapsed), which a step of the wall clock since New
// leaves behind, and a reader that needs the wall time maps the monotonic
// reading onto a recent reading of the wall clock (as headers.Writer does).
func (c clock) at(us int64) time.Time {
	return c.base.Add(time.Duration(us-c.baseUS) * time.Microsecond)
}
