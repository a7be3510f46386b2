package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/leasebound"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// leaseKey is the global layer's one key in the lease tests.
const leaseKey = "api"

// leaseCounter is a real store that counts the Takes and Refunds that
// ask for the global layer's key: its round trips.
type leaseCounter struct {
	core.Store
	takes, refunds atomic.Int64
}

func (s *leaseCounter) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	for i := range reqs {
		if reqs[i].Key == leaseKey {
			s.refunds.Add(1)
			break
		}
	}
	return s.Store.Refund(ctx, at, reqs)
}

func (s *leaseCounter) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	for i := range reqs {
		if reqs[i].Key == leaseKey {
			s.takes.Add(1)
			break
		}
	}
	return s.Store.Take(ctx, now, reqs, out)
}

// TestLeaseFleet: Limiters sharing one Redis, or a Redis Cluster of three
// masters, with a leased global layer and a per-client layer, on a
// virtual clock: the global layer never admits more than its limit in a
// window, the client layer admits exactly its limit (a client it denies
// has had all of it), and the global key costs far fewer round trips
// than requests.
func TestLeaseFleet(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		s, _, _ := newStore(t)
		testLeaseFleet(t, s)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		testLeaseFleet(t, mustNew(t, cl.Client(), WithPrefix(testPrefix(t))))
	})
}

func testLeaseFleet(t *testing.T, s *Store) {
	global := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 2_000, Window: time.Second, Lease: 100 * time.Millisecond}
	client := core.Policy{Name: "client", Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
	store := &leaseCounter{Store: s}
	servers := leasebound.Fleet(t, store, 8, global, client)
	rng := rand.New(rand.NewPCG(5, 6))
	ctx := context.Background()
	const ms, perMs, clients = 2_000, 6, 300 // 6,000/s, over the limit of 2,000
	perWindow := map[int64]int64{}
	perClient := map[string]int64{} // client/window -> admitted
	var requests, fromLease, clientDenials int
	hot := 0
	for i := range ms {
		now := t0.Add(time.Duration(i)*time.Millisecond + time.Duration(rng.IntN(1000))) // to the nanosecond
		if i%300 == 0 {
			hot = rng.IntN(len(servers)) // traffic moves
		}
		for range perMs {
			srv := hot
			if rng.IntN(2) == 0 {
				srv = rng.IntN(len(servers))
			}
			c := fmt.Sprint("c", rng.IntN(clients))
			d, _, err := servers[srv].AllowLayers(ctx, now, []core.Request{{Key: leaseKey, Cost: 1}, {Key: c, Cost: 1}}, nil)
			require.NoError(t, err)
			require.NoError(t, d.Err)
			requests++
			w := now.UnixMicro() / global.Window.Microseconds()
			cw := fmt.Sprint(c, "/", w)
			switch {
			case d.Allowed:
				perWindow[w]++
				perClient[cw]++
				require.LessOrEqual(t, perClient[cw], client.Limit, "%s: the client layer", cw)
			case d.Policy.Name == "client":
				clientDenials++
				require.Equal(t, client.Limit, perClient[cw], "%s: denied by its layer before its limit", cw)
			}
			if d.Source == core.SourceLease {
				fromLease++
			}
		}
	}
	var total int64
	for w, n := range perWindow {
		assert.LessOrEqual(t, n, global.Limit, "window %d", w)
		total += n
	}
	takes, refunds := int(store.takes.Load()), int(store.refunds.Load())
	assert.Positive(t, clientDenials, "the client layer denied")
	assert.Less(t, (takes+refunds)*10, requests, "%d takes and %d refunds for the global key, %d requests", takes, refunds, requests)
	t.Logf("admitted %d of %d requests (global limit %d a window, %d windows); %d decided from a lease; round trips for the global key: %d takes, %d refunds (%.4f a request); %d client denials",
		total, requests, global.Limit, len(perWindow), fromLease, takes, refunds, float64(takes+refunds)/float64(requests), clientDenials)
}

// TestLeaseRedisOutage: with Redis gone (killed, or the client closed
// where the server is not ours), Limiters decide from the grants they
// hold until those expire, then by the layer's fail mode (FailClosed).
func TestLeaseRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	opts := srv.Options()
	opts.MaxRetries, opts.DialerRetries = -1, 1 // a refused connection fails at once
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 1_000, Window: time.Minute, Lease: 200 * time.Millisecond, FailClosed: time.Second}
	servers := leasebound.Fleet(t, s, 3, p)
	ctx := context.Background()
	ask := func(l *core.Limiter, at time.Duration) core.Decision {
		d, _, err := l.AllowLayers(ctx, t0.Add(at), []core.Request{{Key: leaseKey, Cost: 1}}, nil)
		require.NoError(t, err)
		return d
	}
	for i := range 100 { // grow the shares
		for _, l := range servers {
			d := ask(l, time.Duration(i)*time.Millisecond)
			require.True(t, d.Allowed)
			require.NoError(t, d.Err)
		}
	}
	if srv.External() {
		require.NoError(t, c.Close())
	} else {
		srv.Kill()
	}
	// Every grant was taken before 100ms, so expires before 300ms.
	outage, expired := 100*time.Millisecond, 300*time.Millisecond
	var held, failed int
	for at := outage; at < expired+100*time.Millisecond; at += time.Millisecond {
		for i, l := range servers {
			d := ask(l, at)
			switch {
			case d.Allowed:
				require.Equal(t, core.SourceLease, d.Source, "server %d at %v", i, at)
				require.Less(t, at, expired, "server %d admitted from a grant past its lifetime", i)
				held++
			default:
				require.Equal(t, core.SourceFailMode, d.Source, "server %d at %v: %+v", i, at, d)
				require.Error(t, d.Err)
				failed++
			}
		}
	}
	assert.Positive(t, held, "decided from the grants held")
	assert.Positive(t, failed, "then by the fail mode")
	d := ask(servers[0], expired+time.Second)
	assert.False(t, d.Allowed)
	assert.Equal(t, core.SourceFailMode, d.Source)
	assert.False(t, errors.Is(d.Err, context.Canceled))
	t.Logf("during the outage: %d admitted from grants held, %d denied by FailClosed", held, failed)
}

// TestLeaseBoundSearchRedis runs the search for a counter-example to the
// lease bound (package leasebound) over Redis, and over a Redis Cluster of
// three masters: the stores' own scripts count, refund and date.
func TestLeaseBoundSearchRedis(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		c := redistest.Start(t).Client()
		searchLeases(t, c, 24)
	})
	t.Run("cluster", func(t *testing.T) {
		searchLeases(t, redistest.StartCluster(t).Client(), 12)
	})
}

// searchLeases runs n scenarios of the lease search (or as many as
// LEASE_BOUND_SCENARIOS says), each over a store of its own prefix on c.
func searchLeases(t *testing.T, c redis.UniversalClient, n uint64) {
	first, n := leasebound.Range(t, n)
	start := time.Now()
	requests, lease := leasebound.Search(t, func(t *testing.T) core.Store {
		return mustNew(t, c, WithPrefix(testPrefix(t)+fmt.Sprint(rand.Uint64(), ":")))
	}, first, n)
	t.Logf("%d scenarios from seed %d, %d requests (%d decided from a lease), %v", n, first, requests, lease, time.Since(start).Round(time.Millisecond))
}
