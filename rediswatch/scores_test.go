package rediswatch_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/scores"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/rediswatch"
)

var s0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestScoresMatchMemory: random histories of signals, with clock
// step-backs, give the same scores in Redis (scores.lua) as in process
// (internal/rules/scores), to 1e-12, one add at a time and in batches,
// and each key's TTL is when its score is forgotten. (Each weight is at
// least 1: a score below scores.Forgotten is forgotten by Redis within a
// millisecond, and only decays in process.)
func TestScoresMatchMemory(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	prefix := fmt.Sprintf("match-%d", rand.Int64())
	shared, err := rediswatch.NewScores(c, rediswatch.WithKey(prefix))
	require.NoError(t, err)
	const hl = 10 * time.Second
	m, err := scores.NewMemory(hl, 10_000)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	now := s0
	for i := 0; i < 2000; {
		n := 1 + rng.IntN(3)*rng.IntN(8) // one, most often
		keys, weights, at, got := make([]string, n), make([]float64, n), make([]time.Time, n), make([]float64, n)
		for j := range n {
			now = now.Add(time.Duration(rng.Int64N(int64(5 * time.Second))))
			if rng.IntN(10) == 0 {
				now = now.Add(-time.Duration(rng.Int64N(int64(time.Second)))) // steps back
			}
			keys[j] = fmt.Sprintf("k%d", rng.IntN(20)+20*j) // distinct within a batch
			weights[j], at[j] = float64(1+rng.IntN(5))+rng.Float64(), now
		}
		want := make([]scores.Entry, n)
		for j := range n {
			want[j] = m.AddAt(keys[j], weights[j], at[j].UnixMicro())
		}
		require.Nil(t, shared.AddScores(ctx, hl, keys, weights, at, got), "step %d", i)
		for j := range n {
			require.InEpsilon(t, want[j].V, got[j], 1e-12, "step %d: the score", i+j)
			require.Equal(t, want[j].At, at[j].UnixMicro(), "step %d: as of", i+j)
			require.InEpsilon(t, want[j].V, stored(t, c, prefix+":"+keys[j]), 1e-12, "step %d: Redis's", i+j)
		}
		i += n
	}
	ttl, err := c.PTTL(ctx, prefix+":k0").Result()
	require.NoError(t, err)
	e, ok := m.Last("k0")
	require.True(t, ok)
	life := time.Duration(math.Ceil(float64(hl.Microseconds())*math.Log2(e.V/scores.Forgotten))) * time.Microsecond
	assert.InDelta(t, float64(life), float64(ttl), float64(2*time.Second), "forgotten when it decays below %v", scores.Forgotten)
}

// TestScoresErrors: a failed add returns its error, and sets no score;
// in a batch, each add has its own. NewScores takes WithKey alone.
func TestScoresErrors(t *testing.T) {
	ctx := context.Background()
	shared, err := rediswatch.NewScores(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}))
	require.NoError(t, err)
	keys, weights, at, got := []string{"s:a", "s:b"}, []float64{1, 1}, []time.Time{s0, s0}, []float64{0, 0}
	for _, n := range []int{1, 2} {
		errs := shared.AddScores(ctx, time.Minute, keys[:n], weights[:n], at[:n], got[:n])
		require.Len(t, errs, n)
		for j := range n {
			assert.Error(t, errs[j])
			assert.Zero(t, got[j])
			assert.Equal(t, s0, at[j], "as it was")
		}
	}

	// One add of a batch failing: a key holding another type than
	// scores.lua's string. The others are made.
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("errors-%d", rand.Int64())
	require.NoError(t, srv.Client().LPush(ctx, prefix+":s:b", "x").Err())
	shared, err = rediswatch.NewScores(srv.Client(), rediswatch.WithKey(prefix))
	require.NoError(t, err)
	keys, weights = []string{"s:a", "s:b", "s:c"}, []float64{1, 2, 3}
	at, got = []time.Time{s0, s0, s0}, make([]float64, 3)
	errs := shared.AddScores(ctx, time.Minute, keys, weights, at, got)
	require.Len(t, errs, 3)
	assert.NoError(t, errs[0])
	assert.ErrorContains(t, errs[1], "WRONGTYPE")
	assert.NoError(t, errs[2])
	assert.Equal(t, []float64{1, 0, 3}, got)
	for name, opts := range map[string][]rediswatch.Option{
		"a poll interval": {rediswatch.WithPollInterval(time.Second)},
		"a max":           {rediswatch.WithMax(10)},
		"a nil option":    {nil},
	} {
		_, err := rediswatch.NewScores(redis.NewClient(&redis.Options{}), opts...)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
	_, err = rediswatch.NewScores(nil)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
}

// stored reads key's score as Redis holds it (scores.lua's '<dd'), at
// its last signal.
func stored(t *testing.T, c redis.UniversalClient, key string) float64 {
	t.Helper()
	b, err := c.Get(context.Background(), key).Bytes()
	require.NoError(t, err)
	require.Len(t, b, 16)
	return math.Float64frombits(binary.LittleEndian.Uint64(b[:8]))
}
