package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// logPair decides the same requests on Redis and on core/memstore, the
// reference, and requires the same Decision from both.
type logPair struct {
	t  *testing.T
	rs *Store
	ms *memstore.Store
	p  core.Policy
}

func newLogPair(t *testing.T, rs *Store, p core.Policy) *logPair {
	return &logPair{t: t, rs: rs, ms: newMemStore(t), p: p}
}

// take decides cost at at on both stores and returns the Decision.
func (lp *logPair) take(key string, cost int64, at time.Time) core.Decision {
	lp.t.Helper()
	ctx := context.Background()
	req := core.Request{Key: key, Policy: lp.p, Cost: cost}
	want, _, err := take1(lp.ms, ctx, at, req)
	require.NoError(lp.t, err)
	got, _, err := take1(lp.rs, ctx, at, req)
	require.NoError(lp.t, err)
	require.Equal(lp.t, want, got, "cost %d at %v", cost, at.Sub(t0))
	return got
}

// TestLogLargeCost: a request of cost 100 000 on a log of limit 100 000
// writes one member of a few dozen bytes, with a handful of commands,
// where the log of one member per unit wrote 100 000 members (12.5 MB) in
// 200 ZADDs and ran for a large fraction of a second. The decisions are
// core/memstore's.
func TestLogLargeCost(t *testing.T) {
	srv := redistest.StartWith(t) // of its own: the test resets its statistics
	c := srv.Client()
	ctx := context.Background()
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	p := core.Policy{Name: "big", Algorithm: core.SlidingWindowLog, Limit: limits.MaxLogLimit, Window: time.Hour}
	lp := newLogPair(t, s, p)
	key := s.stateKey("k", p)

	// Load the script, then count from zero: Redis counts the commands a
	// script calls in INFO commandstats, and logs in SLOWLOG any command
	// (a script with all it calls) slower than the threshold.
	_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "warm-up", Policy: p, Cost: 1})
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, "slowlog-log-slower-than", "100000").Err()) // 100 ms
	require.NoError(t, c.SlowLogReset(ctx).Err())
	require.NoError(t, c.ConfigResetStat(ctx).Err())

	admitted, zcards := 0, 0 // admissions; ZCARDs the test sends
	for round := range 3 {
		at := t0.Add(time.Duration(round) * (p.Window + time.Millisecond))
		// The whole limit at once: one member, whatever the cost.
		d := lp.take("k", p.Limit, at)
		require.True(t, d.Allowed)
		admitted++
		require.EqualValues(t, 1, c.ZCard(ctx, key).Val(), "members after a request of cost %d", p.Limit)
		zcards++
		usage, err := c.MemoryUsage(ctx, key).Result()
		require.NoError(t, err)
		assert.Less(t, usage, int64(512), "MEMORY USAGE of the log, in bytes")
		// Denied requests, small and large, until the window ends.
		for i, cost := range []int64{1, 2, p.Limit / 2, p.Limit} {
			d := lp.take("k", cost, at.Add(time.Duration(i+1)*time.Minute))
			require.False(t, d.Allowed)
		}
	}
	// Requests of cost 1 and 1000 share the window with one of 50 000.
	at := t0.Add(10 * p.Window)
	for i := range 100 {
		cost := int64(1)
		if i%10 == 0 {
			cost = 1000
		}
		if lp.take("k", cost, at.Add(time.Duration(i)*time.Second)).Allowed {
			admitted++
		}
	}
	if lp.take("k", p.Limit/2, at.Add(100*time.Second)).Allowed {
		admitted++
	}
	for i := range 5 { // denied: the search runs over 100 members
		require.False(t, lp.take("k", p.Limit/2+int64(i)*9000, at.Add(101*time.Second)).Allowed)
	}
	require.EqualValues(t, 101, c.ZCard(ctx, key).Val())
	zcards++

	stats, err := commandStats(ctx, c)
	require.NoError(t, err)
	scripts := stats["evalsha"].calls + stats["eval"].calls
	inner := -int64(zcards)
	for name, st := range stats {
		switch name {
		case "evalsha", "eval", "config|resetstat", "memory|usage": // not called by a script
		default:
			inner += st.calls
		}
	}
	t.Logf("%d scripts, %d commands in them, %.1f µs per script; %v",
		scripts, inner, float64(stats["evalsha"].usec+stats["eval"].usec)/float64(scripts), stats)
	assert.EqualValues(t, admitted, stats["zadd"].calls, "one ZADD per admitted request")
	assert.LessOrEqual(t, inner, 10*scripts, "commands called per script run")
	slow, err := c.SlowLogGet(ctx, 10).Result()
	require.NoError(t, err)
	assert.Empty(t, slow, "scripts slower than 100 ms")
}

// TestLogRetryAfterSearch fills logs of hundreds to thousands of members
// with requests of random costs and times, some in one microsecond, and
// asks, at random times, for random costs up to the limit: RetryAfter
// comes from a search over the members, which must find what core/memstore
// finds.
func TestLogRetryAfterSearch(t *testing.T) {
	s, _, _ := newStore(t)
	for _, l := range []int64{50, 1000, 5000} {
		t.Run(fmt.Sprint(l), func(t *testing.T) {
			p := core.Policy{Name: fmt.Sprint("search", l), Algorithm: core.SlidingWindowLog, Limit: l, Window: time.Minute}
			lp := newLogPair(t, s, p)
			rng := rand.New(rand.NewPCG(uint64(l), 1))
			at := t0
			denied := 0
			for range 3000 {
				switch r := rng.IntN(10); {
				case r < 2: // the same microsecond
				case r < 9:
					at = at.Add(time.Duration(1 + rng.Int64N(int64(p.Window)/int64(l))))
				default:
					at = at.Add(time.Duration(rng.Int64N(int64(p.Window) / 4)))
				}
				cost := 1 + rng.Int64N(3)
				if rng.IntN(4) == 0 {
					cost = 1 + rng.Int64N(l)
				}
				if !lp.take("k", cost, at).Allowed {
					denied++
				}
			}
			assert.Greater(t, denied, 100)
		})
	}
}

// TestLogRebase: a log whose running count nears 2^52, where float64
// stops being exact, is renumbered from its oldest member, and decides as
// before.
func TestLogRebase(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "rebase", Algorithm: core.SlidingWindowLog, Limit: 1000, Window: time.Minute}
	lp := newLogPair(t, s, p)
	key := s.stateKey("k", p)
	// The log of 400 units at t0 and 50 at t0+1ms, numbered as a log that
	// has counted 2^52 - 460 units before them would number them. memstore
	// is given the same requests.
	const from = 1<<52 - 460
	us := func(d time.Duration) float64 { return float64(t0.Add(d).UnixMicro()) }
	require.NoError(t, c.ZAdd(ctx, key,
		redis.Z{Score: us(0), Member: fmt.Sprintf("%d:%d", from, from+400)},
		redis.Z{Score: us(time.Millisecond), Member: fmt.Sprintf("%d:%d", from+400, from+450)},
	).Err())
	require.NoError(t, c.Expire(ctx, key, time.Minute).Err())
	_, _, err := take1(lp.ms, ctx, t0, core.Request{Key: "k", Policy: p, Cost: 400})
	require.NoError(t, err)
	_, _, err = take1(lp.ms, ctx, t0.Add(time.Millisecond), core.Request{Key: "k", Policy: p, Cost: 50})
	require.NoError(t, err)

	members := func() []string {
		t.Helper()
		m, err := c.ZRange(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		return m
	}
	require.True(t, lp.take("k", 5, t0.Add(time.Millisecond)).Allowed) // same µs: widens the newest
	require.Equal(t, []string{fmt.Sprintf("%d:%d", from, from+400), fmt.Sprintf("%d:%d", from+400, from+455)}, members())
	require.False(t, lp.take("k", 600, t0.Add(2*time.Millisecond)).Allowed)
	require.True(t, lp.take("k", 20, t0.Add(2*time.Millisecond)).Allowed) // passes 2^52
	require.Equal(t, []string{"0:400", "400:455", "455:475"}, members())
	for i, cost := range []int64{525, 1, 400, 401, 455, 1000, 30, 1} {
		lp.take("k", cost, t0.Add(time.Minute+time.Duration(i)*time.Millisecond))
	}

	// Passing 2^52 in the newest member's microsecond: rebased, then
	// widened.
	key = s.stateKey("m", p)
	require.NoError(t, c.ZAdd(ctx, key,
		redis.Z{Score: us(0), Member: fmt.Sprintf("%d:%d", from, from+450)},
	).Err())
	require.NoError(t, c.Expire(ctx, key, time.Minute).Err())
	_, _, err = take1(lp.ms, ctx, t0, core.Request{Key: "m", Policy: p, Cost: 450})
	require.NoError(t, err)
	require.True(t, lp.take("m", 100, t0).Allowed)
	require.Equal(t, []string{"0:550"}, members())
	lp.take("m", 451, t0.Add(time.Millisecond))
	lp.take("m", 450, t0.Add(time.Millisecond))
}

// TestLogConcurrentCosts: four clients (app servers) of one Redis, eight
// goroutines each, send requests of random costs at Redis TIME to one log.
// The units admitted are exactly the units logged, never more than L, and
// each admission sees a Remaining of its own.
func TestLogConcurrentCosts(t *testing.T) {
	srv := redistest.Start(t)
	prefix := testPrefix(t)
	p := core.Policy{Name: "costs", Algorithm: core.SlidingWindowLog, Limit: 1000, Window: time.Hour}
	ctx := context.Background()
	var (
		mu        sync.Mutex
		units     int64
		remaining = map[int64]bool{}
		wg        sync.WaitGroup
	)
	stores := make([]*Store, 4)
	for i := range stores {
		s := mustNew(t, srv.Client(), WithPrefix(prefix))
		stores[i] = s
		for g := range 8 {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
			wg.Go(func() {
				for range 50 {
					cost := 1 + rng.Int64N(40)
					d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: cost})
					if !assert.NoError(t, err) {
						return
					}
					if d.Allowed {
						mu.Lock()
						units += cost
						assert.False(t, remaining[d.Remaining], "Remaining %d seen twice", d.Remaining)
						remaining[d.Remaining] = true
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	assert.LessOrEqual(t, units, p.Limit)
	z, err := srv.Client().ZRange(ctx, stores[0].stateKey("k", p), -1, -1).Result()
	require.NoError(t, err)
	require.Len(t, z, 1)
	_, logged, err := cutMember(z[0])
	require.NoError(t, err)
	assert.Equal(t, units, logged, "units admitted and units logged")
	assert.Greater(t, units, p.Limit-40, "the log filled up")
}
