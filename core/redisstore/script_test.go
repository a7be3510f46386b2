package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestOneRoundTrip counts the commands the client sends: after warm-up,
// one EVALSHA per decision and nothing else; after SCRIPT FLUSH, the next
// decision falls back to EVAL by itself.
func TestOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	hook := newCommandCounter()
	c.AddHook(hook)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	waitChecked(t, s, 10*time.Second) // its INFO goes through the hook too
	ctx := context.Background()
	ps := policies(1000, time.Minute)
	decide := func(i int) {
		t.Helper()
		for _, p := range ps {
			// Both explicit times and Redis TIME.
			req := core.Request{Key: "k" + strconv.Itoa(i%3), Policy: p, Cost: 1}
			if i%2 == 0 {
			}
			_, _, err := take1(s, ctx, t0.Add(time.Duration(i)*time.Millisecond), req)
			require.NoError(t, err, "%s", p.Algorithm)
		}
	}
	decide(0) // loads the scripts (EVALSHA, NOSCRIPT, EVAL)
	hook.reset()
	const n = 20
	for i := range n {
		decide(i)
	}
	names, pipelines := hook.snapshot()
	require.Equal(t, map[string]int{"evalsha": n * len(ps)}, names, "commands of %d decisions", n*len(ps))
	require.Zero(t, pipelines, "pipelines")

	if srv.External() {
		t.Skip("REDIS_URL is set: not flushing the scripts of a shared server")
	}
	require.NoError(t, srv.Client().ScriptFlush(ctx).Err())
	hook.reset()
	decide(1)
	names, _ = hook.snapshot()
	require.Equal(t, map[string]int{"evalsha": len(ps), "eval": len(ps)}, names, "commands after SCRIPT FLUSH")
	hook.reset()
	decide(2)
	names, _ = hook.snapshot()
	require.Equal(t, map[string]int{"evalsha": len(ps)}, names, "commands after the scripts are loaded again")
}

// TestKeys checks the key layout and that Reset deletes every key of the
// client key under the policy, and only those.
func TestKeys(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	for _, p := range policies(5, time.Minute) {
		code := map[core.Algorithm]string{
			core.FixedWindow: "fw2", core.SlidingWindowLog: "swl2", core.SlidingWindowCounter: "swc2",
			core.TokenBucket: "tb3", core.LeakyBucket: "lb2",
		}[p.Algorithm]
		base := s.prefix + "{user:42}:p:" + code
		require.Equal(t, base, s.stateKey("user:42", p), "%s: key", p.Algorithm)
		for _, k := range []string{"user:42", "other"} {
			_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: k, Policy: p, Cost: 2})
			require.NoError(t, err, "%s: Take(%q)", p.Algorithm, k)
		}
		require.EqualValues(t, 1, c.Exists(ctx, base).Val(), "%s: key %s written", p.Algorithm, base)
		require.NoError(t, s.Reset(ctx, "user:42", p), "%s: Reset", p.Algorithm)
		require.EqualValues(t, 0, c.Exists(ctx, base).Val(), "%s: key left after Reset", p.Algorithm)
		require.EqualValues(t, 1, c.Exists(ctx, s.stateKey("other", p)).Val(), "%s: another client's key after Reset", p.Algorithm)
		d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "user:42", Policy: p, Cost: 1})
		require.NoError(t, err, "%s: Take after Reset", p.Algorithm)
		require.True(t, d.Allowed, "%s: after Reset: Allowed", p.Algorithm)
		require.EqualValues(t, 4, d.Remaining, "%s: after Reset: Remaining, of a whole quota", p.Algorithm)
	}
}

// TestDeniedWritesNothing: a denied request leaves the state, TTL included,
// as it was.
func TestDeniedWritesNothing(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	for _, p := range policies(3, time.Hour) {
		req := core.Request{Key: "k", Policy: p, Cost: 3}
		d, _, err := take1(s, ctx, t0, req)
		require.NoError(t, err, "%s", p.Algorithm)
		require.True(t, d.Allowed, "%s: first request: Allowed", p.Algorithm)
		key := s.stateKey("k", p)
		dump := c.Dump(ctx, key).Val()
		ttl := c.PTTL(ctx, key).Val()
		req.Cost = 1
		d, _, err = take1(s, ctx, t0.Add(time.Millisecond), req)
		require.NoError(t, err, "%s", p.Algorithm)
		require.False(t, d.Allowed, "%s: second request: Allowed", p.Algorithm)
		assert.Equal(t, dump, c.Dump(ctx, key).Val(), "%s: the state after a denied request", p.Algorithm)
		assert.LessOrEqual(t, c.PTTL(ctx, key).Val(), ttl, "%s: the TTL after a denied request", p.Algorithm)
	}
}

// TestTTLs decides on many keys with Redis TIME, explicit times and costs,
// then scans every key: each has a TTL, no longer than its state matters.
func TestTTLs(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, explicit bool) {
		s, _, c := newStore(t, withExplicitNowMinTTL(0))
		w := 2 * time.Second
		ps := policies(10, w)
		ps = append(ps,
			core.Policy{Name: "burst", Algorithm: core.TokenBucket, Limit: 10, Window: w, Burst: 30},
			core.Policy{Name: "burst", Algorithm: core.LeakyBucket, Limit: 10, Window: w, Burst: 30},
		)
		for i := range 40 {
			for _, p := range ps {
				req := core.Request{Key: "k" + strconv.Itoa(i%7), Policy: p, Cost: 1 + int64(i%4)}
				if explicit {
				}
				_, _, err := take1(s, ctx, time.Now().Add(time.Duration(i)*time.Millisecond), req)
				require.NoError(t, err, "%s %s", p.Name, p.Algorithm)
			}
		}
		keys := scanKeys(t, ctx, c, s.prefix)
		// 7 client keys, one key per policy; a fixed window key may
		// already be gone if its window just ended.
		require.GreaterOrEqual(t, len(keys), 7*(len(ps)-1), "keys scanned")
		require.LessOrEqual(t, len(keys), 7*len(ps), "keys scanned")
		for _, k := range keys {
			ttl := c.PTTL(ctx, k).Val()
			if ttl == -2*time.Nanosecond || ttl == 0 {
				// Gone since the scan, or in its last millisecond (PTTL
				// rounds down): its expiry passed or is passing (a fixed
				// window ending while a busy machine ran the test). A
				// key with no expiry answers -1, which fails below.
				continue
			}
			// Longest: the sliding counter's two windows; a burst of 30
			// at 10 per 2s takes 6s to refill.
			assert.Positive(t, ttl, "%s: PTTL", k)
			assert.LessOrEqual(t, ttl, 6*time.Second+100*time.Millisecond, "%s: PTTL", k)
		}
	}
	t.Run("time", func(t *testing.T) { run(t, false) })
	t.Run("explicit", func(t *testing.T) { run(t, true) })

	t.Run("explicit-min-ttl", func(t *testing.T) {
		s, _, c := newStore(t)
		p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
		// 1µs before the window ends: the state matters for 1µs of the
		// test's clock, which may stand still for seconds of real time.
		at := t0.Add(time.Second - time.Microsecond)
		_, _, err := take1(s, ctx, at, core.Request{Key: "k", Policy: p, Cost: 1})
		require.NoError(t, err)
		ttl := c.PTTL(ctx, s.stateKey("k", p)).Val()
		assert.GreaterOrEqual(t, ttl, explicitNowMinTTL-time.Second, "PTTL")
		assert.LessOrEqual(t, ttl, explicitNowMinTTL, "PTTL")
	})
}

// TestRedisTime checks that a request without Now is decided at Redis
// TIME, not at the app server's clock.
func TestRedisTime(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}
	d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
	require.NoError(t, err)
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	end := now.Truncate(time.Hour).Add(time.Hour)
	assert.InDelta(t, end.Sub(now), d.ResetAfter, float64(time.Second), "ResetAfter: Redis TIME says %v to the end of the window", end.Sub(now))
	// The state: window start, count, last admission, float64s.
	state, err := c.Get(ctx, s.stateKey("k", p)).Bytes()
	require.NoError(t, err)
	require.Len(t, state, 24, "the state")
	last := int64(math.Float64frombits(binary.LittleEndian.Uint64(state[16:])))
	assert.WithinDuration(t, now, time.UnixMicro(last), time.Second, "the state's time against Redis TIME")
}

// TestTakeRejects: requests the Limiter never sends fail cleanly, without
// a round trip.
func TestTakeRejects(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	for _, c := range []struct {
		req  core.Request
		want error
	}{
		{core.Request{Key: "", Policy: p, Cost: 1}, core.ErrInvalidOption},
		{core.Request{Key: "k", Policy: p, Cost: -1}, core.ErrInvalidOption}, // a give-back needs a now
		{core.Request{Key: "k", Policy: p, Cost: -6}, core.ErrInvalidOption},
		{core.Request{Key: "k", Policy: p, Cost: 6}, core.ErrInvalidOption},
		{core.Request{Key: "k", Policy: core.Policy{Algorithm: "gcra", Limit: 1, Window: time.Second}, Cost: 1}, core.ErrInvalidOption},
		{core.Request{Key: "k", Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 1}, Cost: 1}, core.ErrInvalidOption},
		{core.Request{Key: "k", Policy: core.Policy{Algorithm: core.TokenBucket, Window: time.Second}, Cost: 1}, core.ErrInvalidOption},
	} {
		_, _, err := take1(s, ctx, time.Time{}, c.req)
		assert.ErrorIs(t, err, c.want, "Take(%+v)", c.req)
	}
	assert.ErrorIs(t, s.Reset(ctx, "k", core.Policy{Algorithm: "gcra"}), core.ErrInvalidOption, "Reset of an unknown algorithm")
	assert.ErrorIs(t, s.Reset(ctx, "", p), core.ErrInvalidOption, "Reset of an empty key")
	assert.NoError(t, s.CheckConfig(ctx), "CheckConfig")
}

// TestWrongType: a key of another type surfaces as an error, never a
// decision.
func TestWrongType(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	for _, p := range policies(10, time.Second) {
		if p.Algorithm == core.SlidingWindowLog {
			continue // a ZSET: a string is of another type
		}
		key := s.stateKey("k", p)
		require.NoError(t, c.RPush(ctx, key, "x").Err())
		_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
		assert.ErrorContains(t, err, "WRONGTYPE", "%s: Take over a list key", p.Algorithm)
		// A string, but not the state's.
		require.NoError(t, c.Set(ctx, key, "x", time.Minute).Err())
		_, _, err = take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
		assert.ErrorContains(t, err, "data string too short", "%s: Take over a string of 1 byte", p.Algorithm)
	}
	p := core.Policy{Name: "p", Algorithm: core.SlidingWindowLog, Limit: 10, Window: time.Second}
	require.NoError(t, c.Set(ctx, s.stateKey("k", p), "x", time.Minute).Err())
	_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "k", Policy: p, Cost: 1})
	assert.ErrorContains(t, err, "WRONGTYPE", "%s: Take over a string key", p.Algorithm)
}
