package sloglimit

import (
	"math"
	"sync/atomic"
	"time"
)

// maxSpan bounds the time a burst of records takes at the sampling rate,
// so that the sampler's arithmetic cannot overflow.
const maxSpan = 100 * 365 * 24 * time.Hour

// sampler decides which records of one limit and class are written: a
// token bucket kept as one theoretical arrival time (GCRA), updated by
// compare-and-swap, so that deciding takes no lock. A record is written
// when the bucket, refilled one record per interval up to burst, holds
// one; a dropped one only loads tat and adds to dropped.
type sampler struct {
	tat     atomic.Int64 // when the bucket is full again, in ns on the Logger's clock
	dropped atomic.Int64 // records dropped since the last one written
}

// newSampler returns a sampler whose bucket is full at any time.
func newSampler() *sampler {
	s := new(sampler)
	s.tat.Store(math.MinInt64 / 2)
	return s
}

// rate is a sampling rate in the sampler's units.
type rate struct {
	interval  int64 // ns between records, in the long run
	tolerance int64 // (burst-1) intervals: how far tat may run ahead of now
}

func newRate(perSecond float64, burst int) rate {
	interval := max(int64(math.Round(1e9/perSecond)), 1)
	return rate{interval: interval, tolerance: int64(burst-1) * interval}
}

// take reports whether a record at now (ns) may be written, and takes
// its token if so.
func (s *sampler) take(now int64, r rate) bool {
	for {
		tat := s.tat.Load()
		t := max(tat, now)
		if t-now > r.tolerance {
			return false
		}
		if s.tat.CompareAndSwap(tat, t+r.interval) {
			return true
		}
	}
}
