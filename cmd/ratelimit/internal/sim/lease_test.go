package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/core"
)

// smallFleet is the simulation at scale made small: 20 servers, 10,000
// per second, demand half again above it, traffic moving every 3 s, a
// tenth of the servers dying at 15 s.
func smallFleet(p core.Policy) sim.FleetOptions {
	return sim.FleetOptions{Servers: 20, Policy: p, Demand: 1.5, Duration: 30 * time.Second,
		Hot: 2, HotShare: 0.6, Move: 3 * time.Second, DieAt: 15 * time.Second, Die: 0.1, Seed: 7}
}

func TestLeasesAtScale(t *testing.T) {
	for _, tc := range []struct {
		alg   core.Algorithm
		lease time.Duration
		burst int64
	}{
		{core.FixedWindow, 10 * time.Second / 120, 0},
		{core.SlidingWindowCounter, 10 * time.Second / 120, 0},
		{core.TokenBucket, 10 * time.Second / 100, 10_000},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			p := core.Policy{Name: "global", Algorithm: tc.alg, Limit: 100_000, Window: 10 * time.Second, Burst: tc.burst, Lease: tc.lease}
			r, err := sim.Leases(context.Background(), smallFleet(p), 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, int64(450_000), r.Requests)
			if tc.alg == core.TokenBucket {
				assert.Equal(t, int64(1_000), r.Bound, "rate times the lease")
				assert.LessOrEqual(t, r.WorstExcess, r.Bound)
			} else {
				assert.Zero(t, r.WorstExcess, "never above the limit in a window")
			}
			if tc.alg == core.FixedWindow {
				assert.GreaterOrEqual(t, r.Utilization, 0.99)
			}
			assert.InDelta(t, r.PlainRequests, r.PlainOps, 0.001, "without leases, one store operation a request")
			assert.GreaterOrEqual(t, r.PlainOps, 20*r.LeasedOps(), "store operations: %.0f/s leased, %.0f/s not", r.LeasedOps(), r.PlainOps)
			assert.Equal(t, 2, r.Dead)
			assert.Positive(t, r.Held, "the dead held units")
			// Dead, they take nothing more: what their death costs the
			// store is what they held.
			assert.LessOrEqual(t, r.Unreturned, r.Held, "no more lost than the dead held")
			t.Logf("%s: excess %d (bound %d), utilization %.4f, store ops %.0f/s leased, %.0f/s not, dead held %d, admitted %d less than without the death",
				tc.alg, r.WorstExcess, r.Bound, r.Utilization, r.LeasedOps(), r.PlainOps, r.Held, r.Lost)
		})
	}
}

func TestFleetOptionsChecked(t *testing.T) {
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 100, Window: time.Second, Lease: 100 * time.Millisecond}
	for name, edit := range map[string]func(o *sim.FleetOptions){
		"no server":    func(o *sim.FleetOptions) { o.Servers = 0 },
		"no demand":    func(o *sim.FleetOptions) { o.Demand = 0 },
		"too many hot": func(o *sim.FleetOptions) { o.Hot = 21 },
		"all die":      func(o *sim.FleetOptions) { o.Die = 1 },
		"bad lease":    func(o *sim.FleetOptions) { o.Policy.Lease = time.Hour },
	} {
		o := smallFleet(p)
		edit(&o)
		_, err := sim.RunFleet(context.Background(), o)
		assert.Error(t, err, name)
	}
}
