package sim_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecasetest"
)

// TestConformanceDecisions replays every scripted case of core/storetest
// (internal/testkit/storecasetest), as CSV traces through the simulator, on the memory store
// with the trace's times as the clock, and compares every Decision with the
// one the suite expects. A trace has no Reset, and the simulator gives each
// policy a store of its own; both change nothing to the decisions, so:
//   - after a Reset of a key, the key's later steps use a fresh key, whose
//     state is the one a Reset leaves (none);
//   - the steps under another policy name are a trace of their own,
//     replayed under that policy (a policy's state is its own in the
//     suite's store too, which is what those steps check);
//   - the simulator always goes through a core.Limiter, as the cases with
//     ViaLimiter do; the Decisions are the same either way;
//   - within a trace, steps are sorted by time, a stable sort: the keys of
//     a case are independent, and each key's steps keep their order.
func TestConformanceDecisions(t *testing.T) {
	// A case's Start counts from the suite's epoch, a trace's times from
	// the simulator's.
	require.True(t, sim.Epoch.Equal(storecasetest.Epoch), "sim.Epoch %v, storecasetest.Epoch %v", sim.Epoch, storecasetest.Epoch)
	cases := storecasetest.Cases()
	require.GreaterOrEqual(t, len(cases), 39, "the suite's scripted cases")
	for _, c := range cases {
		t.Run(string(c.Policy.Algorithm)+"/"+c.Name, func(t *testing.T) {
			type request struct {
				step int
				at   time.Duration
				key  string
				cost int64
			}
			traces := map[string][]request{} // by policy name
			resets := map[string]int{}       // by policy name and key
			for i, st := range c.Steps {
				name := cmp.Or(st.PolicyName, c.Policy.Name)
				key := "client"
				if st.Key != "" {
					key += "-" + st.Key
				}
				if st.Reset {
					resets[name+"|"+key]++
					continue
				}
				if n := resets[name+"|"+key]; n > 0 {
					key += fmt.Sprintf("#reset%d", n)
				}
				traces[name] = append(traces[name], request{i, c.Start + st.At, key, cmp.Or(st.Cost, 1)})
			}
			checked := 0
			for name, reqs := range traces {
				slices.SortStableFunc(reqs, func(a, b request) int { return cmp.Compare(a.at, b.at) })
				var csv strings.Builder
				for _, r := range reqs {
					fmt.Fprintf(&csv, "%d.%09d,%s,%d\n", r.at/time.Second, r.at%time.Second, r.key, r.cost)
				}
				events, err := sim.ParseCSV(strings.NewReader(csv.String()))
				require.NoError(t, err)
				p := c.Policy
				p.Name = name
				res, err := sim.Run(context.Background(), []core.Policy{p}, events, sim.Options{Decisions: true})
				require.NoError(t, err)
				require.Len(t, res, 1)
				require.Len(t, res[0].Decisions, len(reqs))
				for j, r := range reqs {
					want := c.Steps[r.step].Want
					if want.Limit == 0 {
						want.Limit = limits.Capacity(p.Algorithm, p.Limit, p.Burst)
					}
					got := res[0].Decisions[j]
					assert.Equal(t, show(want, core.SourceStore), show(got, got.Source),
						"step %d (at %v, cost %d, key %q, policy %q)", r.step, c.Steps[r.step].At, r.cost, r.key, name)
					checked++
				}
			}
			assert.Positive(t, checked)
		})
	}
}

// show formats the fields of a Decision that the suite compares.
func show(d core.Decision, source core.Source) string {
	return fmt.Sprintf("allowed=%v limit=%d remaining=%d reset=%v retry=%v delay=%v source=%v",
		d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay, source)
}
