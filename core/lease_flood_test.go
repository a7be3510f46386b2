package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/leasebound"
)

// TestLeaseFlood: a leased per-client layer under 100,000 distinct keys
// holds leases for at most 1,024 of them (beyond, the store decides, as
// for a layer not leased), and stays exact: every key admits its limit,
// and no more, in its window, whoever decides.
func TestLeaseFlood(t *testing.T) {
	keys := 100_000
	if raceEnabled || testing.Short() {
		keys = 2_000 // past the table: each request of a key beyond it sweeps the table
	}
	p := core.Policy{Name: "client", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute, Lease: time.Second}
	l := leasebound.Fleet(t, newMemStore(t), 1, p)[0]
	ctx := context.Background()
	sources := map[core.Source]int{}
	most := int64(0)
	ask := func(key string, at time.Time) core.Decision {
		d, _, err := l.AllowLayers(ctx, at, []core.Request{{Key: key, Cost: 1}}, nil)
		require.NoError(t, err)
		require.NoError(t, d.Err)
		sources[d.Source]++
		most = max(most, l.LeasedKeys(0))
		return d
	}
	step := 100 * time.Microsecond // 1,024 keys in 0.1s; a lease idle for two lifetimes is swept
	for k := range keys {
		at := leaseT0.Add(time.Duration(k) * step)
		key := fmt.Sprint("client-", k)
		admitted := 0
		for range p.Limit + 1 {
			if ask(key, at).Allowed {
				admitted++
			}
		}
		require.EqualValues(t, p.Limit, admitted, "%s at %v", key, at.Sub(leaseT0))
		if k%97 == 0 && k > 0 {
			// A key seen before, in the same window: it has had its limit.
			old := k - 1 - k%500
			if leaseT0.Add(time.Duration(old)*step).Truncate(p.Window) == at.Truncate(p.Window) {
				assert.False(t, ask(fmt.Sprint("client-", old), at).Allowed, "client-%d again at %v", old, at.Sub(leaseT0))
			}
		}
	}
	assert.LessOrEqual(t, most, int64(1024), "leases held")
	assert.Positive(t, sources[core.SourceLease], "decided from leases")
	assert.Positive(t, sources[core.SourceStore], "decided by the store beyond the table")
	t.Logf("%d keys: at most %d leases held; decisions by source %v", keys, most, sources)
}
