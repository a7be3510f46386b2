//go:build unix

package leasefleet

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/gobuild"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// servers is the size of the fleet.
const servers = 8

// Bounds of the measurement.
const (
	warmUp       = time.Second // left out of the round trips' share
	maxTripShare = 0.05        // global round trips per request, at most
)

// TestFleet runs eight app servers (./server) as processes over one
// Redis, then over a Redis Cluster of three masters, drives them above
// the leased global limit, and checks that the global layer admits no
// more than its Limit in any window, that the per-client layers admit
// exactly their limit to a client above it, and that the global layer's
// store round trips are at most 5% of the requests after warm-up.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eight app servers over Redis, then a Redis Cluster, for 35 to 50 s")
	}
	bin := filepath.Join(t.TempDir(), "leasefleet-server")
	gobuild.Build(t, ".", bin, "./server")

	t.Run("redis", func(t *testing.T) {
		r := redistest.Start(t)
		url := "redis://" + r.Addr()
		if r.External() {
			url = os.Getenv("REDIS_URL")
		}
		runFleet(t, bin, "REDIS_URL="+url)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		runFleet(t, bin, "REDIS_CLUSTER="+strings.Join(c.Addrs(), ","))
	})
}

// runFleet runs the fleet over the store of env, drives it and checks it.
func runFleet(t *testing.T, bin string, env string) {
	prefix := fmt.Sprintf("leasefleet-%d:", time.Now().UnixNano())
	ps := startFleet(t, bin, servers, env, "PREFIX="+prefix)
	bases := make([]string, len(ps))
	for i, p := range ps {
		bases[i] = p.base
	}
	c := newClient()
	defer c.CloseIdleConnections()

	// Two whole windows after the warm-up, ending on a window's end.
	start := time.Now()
	end := time.Unix(WindowOf(start.Add(warmUp)), 0).Add(3 * Window)
	done := make(chan []result, 1)
	go func() { done <- drive(c, bases, end) }()
	time.Sleep(time.Until(start.Add(warmUp)))
	before := sum(fleetCounts(t, c, ps))
	results := <-done
	after := sum(fleetCounts(t, c, ps))
	t.Logf("load: %d requests in %v to %d servers", len(results), time.Since(start).Round(time.Millisecond), servers)

	checkErrors(t, results)
	checkGlobal(t, results, after, start, end)
	checkClients(t, results)
	checkTrips(t, before, after)
	stopFleet(t, ps)
}

// checkErrors expects every request answered 200 or 429, or 503 when the
// store failed (FailClosed: a machine too busy for Redis to answer in
// time), and reports those.
func checkErrors(t *testing.T, results []result) {
	t.Helper()
	bad, failed := 0, 0
	for _, r := range results {
		switch {
		case r.err == nil && r.status == http.StatusServiceUnavailable:
			failed++
		case r.err != nil || r.status != http.StatusOK && r.status != http.StatusTooManyRequests:
			if bad++; bad <= 5 {
				t.Errorf("%s %s (%s): status %d, error %v", r.method, r.path, r.key, r.status, r.err)
			}
		}
	}
	assert.Zero(t, bad, "requests neither admitted nor denied")
	if failed > 0 {
		t.Logf("%d requests answered 503: the store failed (a busy machine)", failed)
	}
}

// checkGlobal expects the fleet's admissions in every window within
// GlobalLimit (checkBound), demand above it in every whole window of the
// load (from start to end), and some requests denied by the global layer.
func checkGlobal(t *testing.T, results []result, c Counts, start, end time.Time) {
	t.Helper()
	sent := map[int64]int64{}
	globalDenied := 0
	for _, r := range results {
		sent[WindowOf(r.t0)]++
		if r.status == http.StatusTooManyRequests && r.limit == GlobalLimit {
			globalDenied++
		}
	}
	wholes := 0
	for w := WindowOf(start); w < end.Unix(); w += int64(Window / time.Second) {
		from := time.Unix(w, 0)
		if !from.Before(start) && !from.Add(Window).After(end) {
			wholes++
			assert.Greater(t, sent[w], int64(GlobalLimit), "window %d: demand above the global limit", w)
		}
	}
	assert.GreaterOrEqual(t, wholes, 2, "whole windows in the load")
	checkBound(t, c, sent)
	t.Logf("global layer: %d requests denied by it; %d of %d requests decided by a lease (%.1f%%)",
		globalDenied, c.LeaseDecisions, c.Requests, 100*float64(c.LeaseDecisions)/float64(c.Requests))
	assert.Positive(t, globalDenied, "the global layer denied no request")
}

// checkBound expects the admissions of c within GlobalLimit in every
// window. An admission the servers counted as straddling windows w and
// w+1 (it arrived in w and reached the handler in w+1) was decided in
// one of them: each is put in w while w has room, else in w+1, which is
// the assignment that best keeps every window within the limit; the bound
// holds if that one does.
func checkBound(t *testing.T, c Counts, sent map[int64]int64) {
	t.Helper()
	keys := slices.Sorted(maps.Keys(c.Admitted))
	keys = slices.Sorted(slices.Values(append(keys, slices.Collect(maps.Keys(c.Straddled))...)))
	if len(keys) == 0 {
		t.Fatal("no admission counted")
	}
	step := int64(Window / time.Second)
	carry := int64(0) // straddling admissions put in w, for want of room in w-1
	for w := keys[0]; w <= keys[len(keys)-1]+step; w += step {
		n := c.Admitted[w] + carry
		into := min(c.Straddled[w], max(GlobalLimit-n, 0))
		if n+c.Straddled[w] > 0 {
			t.Logf("window %d: %d requests sent, %d admitted, %d of them straddling from the window before; %d straddling into the next; limit %d (%.1f%% used)",
				w, sent[w], n+into, carry, c.Straddled[w]-into, GlobalLimit, 100*float64(n+into)/GlobalLimit)
		}
		assert.LessOrEqual(t, n, int64(GlobalLimit), "window %d: admitted above the global limit", w)
		carry = c.Straddled[w] - into
	}
}

// checkTrips expects the store calls for the global key, between before
// and after (the warm-up left out), at most maxTripShare of the requests.
func checkTrips(t *testing.T, before, after Counts) {
	t.Helper()
	requests := after.Requests - before.Requests
	takes := after.GlobalTakes - before.GlobalTakes
	refunds := after.GlobalRefunds - before.GlobalRefunds
	trips := takes + refunds
	share := float64(trips) / float64(requests)
	t.Logf("steady state: %d requests; global key: %d takes (%d of them renewals, %d units in all) + %d refunds = %d round trips, %.2f%% of requests; all store calls: %d takes, %d refunds",
		requests, takes, after.GlobalRenewals-before.GlobalRenewals, after.GlobalTakeUnits-before.GlobalTakeUnits, refunds, trips, 100*share,
		after.Takes-before.Takes, after.Refunds-before.Refunds)
	require.Positive(t, requests, "no request after the warm-up")
	assert.LessOrEqual(t, share, maxTripShare, "round trips for the global key per request")
}
