package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// spreadRequests returns one request per algorithm, of cost, each on a
// client key of its own in a slot of its own (spreadKeys), the odd ones
// with a lockout.
func spreadRequests(t *testing.T, s *Store, c *redis.ClusterClient, cost int64) []core.Request {
	t.Helper()
	algs := limits.Algorithms[core.Algorithm]()
	keys := spreadKeys(t, s, c, len(algs))
	reqs := make([]core.Request, len(algs))
	for i, a := range algs {
		p := core.Policy{Name: "spread-" + string(a), Algorithm: a, Limit: 10, Window: 10 * time.Second}
		if i%2 == 1 {
			p.Lockout = time.Minute
		}
		reqs[i] = core.Request{Key: keys[i], Policy: p, Cost: cost}
	}
	return reqs
}

// storedAt returns the time of the last admission that the state of r
// holds: the packed state's, or the log's newest member's score.
func storedAt(t *testing.T, s *Store, c redis.UniversalClient, r core.Request) int64 {
	t.Helper()
	ctx := context.Background()
	k := s.stateKey(r.Key, r.Policy)
	if r.Policy.Algorithm == core.SlidingWindowLog {
		z, err := c.ZRangeWithScores(ctx, k, -1, -1).Result()
		require.NoError(t, err, k)
		require.Len(t, z, 1, k)
		return int64(z[0].Score)
	}
	b, err := c.Get(ctx, k).Bytes()
	require.NoError(t, err, k)
	// The time is the last number: '<ddd', '<dddd', '<dd'.
	return int64(math.Float64frombits(binary.LittleEndian.Uint64(b[len(b)-8:])))
}

// TestMultiClusterOneTime: over a Redis Cluster, a TakeAll of five
// algorithms (two with a lockout) on client keys in five slots over the
// three masters, at Redis TIME, decides every slot at one time, the one it
// returns: every state holds it as its last admission, and a TakeAll of
// give-backs dated with it gives back exactly what each took, in every
// slot, the log's member included, leaving every quota whole. TakeAlls of
// peeks return a time too, and one at an explicit time returns that time.
func TestMultiClusterOneTime(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	reqs := spreadRequests(t, s, c, 3)
	out := make([]core.Decision, len(reqs))
	give := make([]core.Request, len(reqs))
	peeks := make([]core.Request, len(reqs))
	for i, r := range reqs {
		give[i], peeks[i] = r, r
		give[i].Cost, peeks[i].Cost = -3, 0
	}
	for round := range 20 {
		at, err := takeN(s, ctx, time.Time{}, reqs, out)
		require.NoError(t, err, "round %d", round)
		requireDecidedAt(t, time.Time{}, at, fmt.Sprintf("round %d: TakeAll", round))
		for i, r := range reqs {
			require.True(t, out[i].Allowed, "round %d: layer %d", round, i)
			assert.Equal(t, at.UnixMicro(), storedAt(t, s, c, r), "round %d: %s: the state's time is the one returned", round, r.Policy.Algorithm)
			ttl := c.PTTL(ctx, s.stateKey(r.Key, r.Policy)).Val()
			assert.Positive(t, ttl, "round %d: %s: TTL", round, r.Policy.Algorithm)
			assert.LessOrEqual(t, ttl, explicitNowMinTTL+r.Policy.Window, "round %d: %s: TTL", round, r.Policy.Algorithm)
		}
		gt, err := takeN(s, ctx, at, give, out)
		require.NoError(t, err, "round %d: give-backs", round)
		requireDecidedAt(t, at, gt, fmt.Sprintf("round %d: give-backs", round))
		pt, err := takeN(s, ctx, at, peeks, out)
		require.NoError(t, err, "round %d: peeks", round)
		requireDecidedAt(t, at, pt, fmt.Sprintf("round %d: peeks", round))
		for i, r := range reqs {
			assert.Equal(t, out[i].Limit, out[i].Remaining, "round %d: %s: all given back", round, r.Policy.Algorithm)
			assert.Zero(t, out[i].ResetAfter, "round %d: %s: all given back", round, r.Policy.Algorithm)
		}
	}
	pt, err := takeN(s, ctx, time.Time{}, peeks, out)
	require.NoError(t, err)
	requireDecidedAt(t, time.Time{}, pt, "peeks at Redis TIME")
	now := time.Now().Add(time.Hour)
	at, err := takeN(s, ctx, now, reqs, out)
	require.NoError(t, err)
	requireDecidedAt(t, now, at, "TakeAll at an explicit time")
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "layer %d", i)
		assert.Equal(t, now.UnixMicro(), storedAt(t, s, c, r), "%s: the explicit time", r.Policy.Algorithm)
	}
}

// TestMultiClusterGiveBacks: over a Redis Cluster, a TakeAll of
// give-backs over client keys in five slots, one per algorithm (two with a
// lockout), runs one script per slot, sent at once, with no check and no
// undo, and gives back in every slot: each layer then has one unit less
// than its capacity, the one not given back.
func TestMultiClusterGiveBacks(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	counter := newCommandCounter()
	c.AddHook(counter)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	reqs := spreadRequests(t, s, c, 3)
	out := make([]core.Decision, len(reqs))
	at, err := takeN(s, ctx, time.Time{}, reqs, out)
	require.NoError(t, err)
	give := make([]core.Request, len(reqs))
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "layer %d", i)
		give[i] = r
		give[i].Cost = -2
	}
	// The script loaded on every master: give-backs that give nothing back,
	// at another time.
	require.NoError(t, errOf(takeN(s, ctx, at.Add(-time.Hour), give, out)))
	<-s.checked // New's check of the configuration is done: its commands are not counted
	counter.reset()
	gt, err := takeN(s, ctx, at, give, out)
	require.NoError(t, err)
	requireDecidedAt(t, at, gt, "give-backs")
	names, pipelines := counter.snapshot()
	assert.Equal(t, map[string]int{"evalsha": len(reqs)}, names, "one script per slot, nothing else")
	assert.Zero(t, pipelines)
	for i, r := range reqs {
		assert.Equal(t, core.Decision{Allowed: true, Limit: 10}, out[i], "layer %d", i)
		d, _, err := take1(s, ctx, at, core.Request{Key: r.Key, Policy: r.Policy})
		require.NoError(t, err)
		assert.Equal(t, int64(9), d.Remaining, "%s: 2 of 3 given back", r.Policy.Algorithm)
	}
	// Invalid: at a zero now, before any round trip.
	counter.reset()
	assert.ErrorIs(t, errOf(takeN(s, ctx, time.Time{}, give, out)), core.ErrInvalidOption)
	names, _ = counter.snapshot()
	assert.Empty(t, names)
}

// TestMultiRingGiveBacks: over a *redis.Ring of two servers, a TakeAll of
// give-backs over client keys on both shards (one script per client key,
// sent at once) gives back on both, dated with the time the TakeAll that
// admitted returned.
func TestMultiRingGiveBacks(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	if a.External() {
		t.Skip("needs two local redis-servers")
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	s := mustNew(t, ring, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	var reqs []core.Request
	for i, alg := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Name: "room", Algorithm: alg, Limit: 10, Window: 10 * time.Second}
		reqs = append(reqs, core.Request{Key: fmt.Sprintf("ring-%d", i), Policy: p, Cost: 3})
	}
	out := make([]core.Decision, len(reqs))
	at, err := takeN(s, ctx, time.Time{}, reqs, out)
	require.NoError(t, err)
	requireDecidedAt(t, time.Time{}, at, "TakeAll")
	for i, r := range reqs {
		require.True(t, out[i].Allowed, "layer %d", i)
		assert.Equal(t, at.UnixMicro(), storedAt(t, s, ring, r), "%s: the state's time is the one returned", r.Policy.Algorithm)
		reqs[i].Cost = -2
	}
	gt, err := takeN(s, ctx, at, reqs, out)
	require.NoError(t, err)
	requireDecidedAt(t, at, gt, "give-backs")
	for i, r := range reqs {
		assert.Equal(t, core.Decision{Allowed: true, Limit: 10}, out[i], "layer %d", i)
		d, _, err := take1(s, ctx, at, core.Request{Key: r.Key, Policy: r.Policy})
		require.NoError(t, err)
		assert.Equal(t, int64(9), d.Remaining, "%s: 2 of 3 given back", r.Policy.Algorithm)
	}
	assert.Positive(t, a.Client().DBSize(ctx).Val(), "shard a")
	assert.Positive(t, b.Client().DBSize(ctx).Val(), "shard b")
}
