package core_test

import (
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/leasebound"
)

// TestLeaseBoundSearch searches for a counter-example to the bound that
// core/lease.go states (see package leasebound), over memory stores: 240
// scenarios, a few seconds (30 under -race or -short).
// LEASE_BOUND_SCENARIOS=n searches n; LEASE_BOUND_SEED=s runs scenario s
// alone.
func TestLeaseBoundSearch(t *testing.T) {
	def := uint64(240)
	if raceEnabled || testing.Short() {
		def = 30
	}
	first, n := leasebound.Range(t, def)
	start := time.Now()
	requests, lease := leasebound.Search(t, func(t *testing.T) core.Store { return newMemStore(t) }, first, n)
	t.Logf("%d scenarios from seed %d, %d requests (%d decided from a lease), %v", n, first, requests, lease, time.Since(start).Round(time.Millisecond))
}
