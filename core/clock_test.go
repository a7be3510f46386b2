package core_test

import (
	"sync/atomic"
	"time"
)

// testClock is an explicit time the test moves, for AllowAt and HealthAt.
type testClock struct{ ns atomic.Int64 }

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *testClock) now() time.Time          { return t0.Add(time.Duration(c.ns.Load())) }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
