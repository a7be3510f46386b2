package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// memoryUsage returns MEMORY USAGE of key, every element counted.
func memoryUsage(tb testing.TB, c redis.UniversalClient, key string) int64 {
	tb.Helper()
	n, err := c.MemoryUsage(context.Background(), key, 0).Result()
	require.NoError(tb, err, "MEMORY USAGE %s", key)
	return n
}

// redisRateKey writes, with go-redis/redis_rate's own script, the state of
// one admitted request (10 per second) to key.
func redisRateKey(tb testing.TB, c redis.UniversalClient, key string) {
	tb.Helper()
	r, err := redis.NewScript(redisRateAllowN).Run(context.Background(), c, []string{key}, 10, 10, 1, 1).Slice()
	require.NoError(tb, err)
	require.EqualValues(tb, 1, r[0], "redis_rate admits its first request")
}

// TestTokenBucketMemory: the key of a token bucket costs Redis no more
// memory (MEMORY USAGE) than go-redis/redis_rate's key of the same name,
// whatever the state's values: a full bucket's time, a fraction of a token,
// a deep bucket near limits.MaxLimit.
func TestTokenBucketMemory(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	for _, p := range []core.Policy{
		{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second},
		{Name: "p", Algorithm: core.TokenBucket, Limit: 7, Window: 3*time.Second + time.Microsecond, Burst: 13},
		{Name: "p", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: time.Hour},
	} {
		for _, req := range []core.Request{
			{Key: "203.0.113.7", Policy: p, Cost: 1},
			{Key: "203.0.113.7", Policy: p, Cost: 1},
			// A fraction of a token since the request before.
			{Key: "203.0.113.7", Policy: p, Cost: 1},
		} {
			key := s.stateKey(req.Key, p)
			d, _, err := take1(s, ctx, t0.Add(123_457*time.Microsecond), req)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			ours := memoryUsage(t, c, key)
			state, err := c.Get(ctx, key).Result()
			require.NoError(t, err)
			require.NoError(t, c.Del(ctx, key).Err())
			// redis_rate stores Redis TIME as a float, its trailing zeros
			// dropped: a write whose time ends in zeros is a byte or two
			// shorter, which may cross an allocator size class. Its
			// usual size is the largest of a few writes.
			var theirs int64
			for range 5 {
				require.NoError(t, c.Del(ctx, key).Err())
				redisRateKey(t, c, key)
				theirs = max(theirs, memoryUsage(t, c, key))
			}
			// Ours again, for the next request.
			require.NoError(t, c.Set(ctx, key, state, time.Minute).Err())
			assert.LessOrEqual(t, ours, theirs, "%+v: MEMORY USAGE of the key %s: ours against redis_rate's", p, key)
		}
	}
}

// TestLegacyHash: a state in the HASH that the scripts wrote before the
// one-string layout is read as it was, and the next admission replaces it
// by the string.
func TestLegacyHash(t *testing.T) {
	s, _, c := newStore(t)
	ms := newMemStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "p", Limit: 10, Window: time.Second}
	now := t0.UnixMicro()
	start := strconv.FormatInt(now-now%p.Window.Microseconds(), 10)
	last := strconv.FormatInt(now, 10)
	// memstore's state after 7 units at t0, as the old layout wrote it.
	for a, fields := range map[core.Algorithm][]any{
		core.TokenBucket:          {"v", "7", "t", last},
		core.LeakyBucket:          {"v", "7", "t", last},
		core.FixedWindow:          {"w", start, "n", "7", "t", last},
		core.SlidingWindowCounter: {"w", start, "c", "7", "p", "0", "t", last},
	} {
		p.Algorithm = a
		key := s.stateKey("k", p)
		_, _, err := take1(ms, ctx, t0, core.Request{Key: "k", Policy: p, Cost: 7})
		require.NoError(t, err)
		require.NoError(t, c.HSet(ctx, key, fields...).Err())
		require.NoError(t, c.PExpire(ctx, key, time.Minute).Err())
		for i, cost := range []int64{5, 3, 5} {
			req := core.Request{Key: "k", Policy: p, Cost: cost}
			want, _, err := take1(ms, ctx, t0.Add(time.Duration(i+1)*10*time.Millisecond), req)
			require.NoError(t, err)
			got, _, err := take1(s, ctx, t0.Add(time.Duration(i+1)*10*time.Millisecond), req)
			require.NoError(t, err)
			require.Equal(t, want, got, "%s: request %d over the old layout", a, i)
		}
		typ, err := c.Type(ctx, key).Result()
		require.NoError(t, err)
		assert.Equal(t, "string", typ, "%s: the key after an admission", a)
		assert.Positive(t, c.PTTL(ctx, key).Val(), "%s: the key's TTL", a)
	}
}

// BenchmarkMemoryUsage writes the state of one admitted request on each of
// 1000 keys per algorithm, 1000 per minute (and 100 requests a key for
// sliding_window_log/100; two for the buckets at limits.MaxLimit per minute,
// .../max, whose levels have many digits), and reports, per key, Redis's MEMORY USAGE (bytes/key, the key,
// its value and their overhead in the keyspace) and the growth of
// used_memory (used-bytes/key, which counts the expiry too, and the
// keyspace's tables, which grow in steps: a rougher figure); beside them
// go-redis/redis_rate's key (redis_rate), written by its own script. Keys
// are named alike: rl:{client-<n>}:<policy>:<code>. Each case has a
// redis-server of its own; b.N does not matter.
func BenchmarkMemoryUsage(b *testing.B) {
	const keys = 1000
	ctx := context.Background()
	measure := func(b *testing.B, c redis.UniversalClient, write func(i int) string) {
		b.Helper()
		write(keys) // loads the script, outside the measure
		before := usedMemory(b, c)
		var usage int64
		for i := range keys {
			usage += memoryUsage(b, c, write(i))
		}
		used := usedMemory(b, c) - before
		for b.Loop() {
		}
		b.ReportMetric(float64(usage)/keys, "bytes/key")
		b.ReportMetric(float64(used)/keys, "used-bytes/key")
	}
	type shape struct {
		name     string
		alg      core.Algorithm
		limit    int64
		requests int
	}
	shapes := []shape{}
	for _, a := range limits.Algorithms[core.Algorithm]() {
		shapes = append(shapes, shape{string(a), a, 1000, 1})
	}
	shapes = append(shapes,
		shape{"sliding_window_log/100", core.SlidingWindowLog, 1000, 100},
		// Levels of many digits (a fraction of a unit after the second).
		shape{"token_bucket/max", core.TokenBucket, limits.MaxLimit, 2},
		shape{"leaky_bucket/max", core.LeakyBucket, limits.MaxLimit, 2},
	)
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			s, _, c := newStore(b, WithPrefix("rl:"))
			p := core.Policy{Name: "api", Algorithm: sh.alg, Limit: sh.limit, Window: time.Minute}
			measure(b, c, func(i int) string {
				key := "client-" + strconv.Itoa(i)
				for j := range sh.requests {
					d, _, err := take1(s, ctx, t0.Add(time.Duration(j)*time.Millisecond), core.Request{Key: key, Policy: p, Cost: 1})
					if err != nil || !d.Allowed {
						b.Fatalf("%+v, %v", d, err)
					}
				}
				return s.stateKey(key, p)
			})
		})
	}
	b.Run("redis_rate", func(b *testing.B) {
		s, _, c := newStore(b, WithPrefix("rl:"))
		p := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Minute}
		measure(b, c, func(i int) string {
			key := s.stateKey("client-"+strconv.Itoa(i), p)
			redisRateKey(b, c, key)
			return key
		})
	})
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(tb testing.TB, c redis.UniversalClient) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	require.NoError(tb, err)
	return infoValue(tb, info, "used_memory")
}

// infoValue returns the integer field name of an INFO reply.
func infoValue(tb testing.TB, info, name string) int64 {
	tb.Helper()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(tb, err, "INFO %s", name)
			return n
		}
	}
	tb.Fatalf("INFO has no %s", name)
	return 0
}
