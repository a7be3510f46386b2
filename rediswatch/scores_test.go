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
	"github.com/apigate/ratelimit/reputation"
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
		batch := make([]reputation.ScoreAdd, 1+rng.IntN(3)*rng.IntN(8)) // one, most often
		for j := range batch {
			now = now.Add(time.Duration(rng.Int64N(int64(5 * time.Second))))
			if rng.IntN(10) == 0 {
				now = now.Add(-time.Duration(rng.Int64N(int64(time.Second)))) // steps back
			}
			key := fmt.Sprintf("k%d", rng.IntN(20)+20*j) // distinct within a batch
			batch[j] = reputation.ScoreAdd{Key: key, Weight: float64(1+rng.IntN(5)) + rng.Float64(), HalfLife: hl, At: now}
		}
		want := make([]scores.Entry, len(batch))
		for j, a := range batch {
			want[j] = m.AddAt(a.Key, a.Weight, a.At.UnixMicro())
		}
		shared.AddScores(ctx, batch)
		for j, a := range batch {
			require.NoError(t, a.Err, "step %d", i+j)
			require.InEpsilon(t, want[j].V, a.Score, 1e-12, "step %d: the score", i+j)
			require.Equal(t, want[j].At, a.At.UnixMicro(), "step %d: as of", i+j)
			require.InEpsilon(t, want[j].V, stored(t, c, prefix+":"+a.Key), 1e-12, "step %d: Redis's", i+j)
		}
		i += len(batch)
	}
	ttl, err := c.PTTL(ctx, prefix+":k0").Result()
	require.NoError(t, err)
	e, ok := m.Last("k0")
	require.True(t, ok)
	life := time.Duration(math.Ceil(float64(hl.Microseconds())*math.Log2(e.V/scores.Forgotten))) * time.Microsecond
	assert.InDelta(t, float64(life), float64(ttl), float64(2*time.Second), "forgotten when it decays below %v", scores.Forgotten)
}

// TestScoresErrors: a failed add sets its Err, not a score; NewScores
// takes WithKey alone.
func TestScoresErrors(t *testing.T) {
	shared, err := rediswatch.NewScores(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}))
	require.NoError(t, err)
	adds := []reputation.ScoreAdd{{Key: "s:a", Weight: 1, HalfLife: time.Minute, At: s0}, {Key: "s:b", Weight: 1, HalfLife: time.Minute, At: s0}}
	shared.AddScores(context.Background(), adds[:1])
	shared.AddScores(context.Background(), adds)
	for _, a := range adds {
		assert.Error(t, a.Err)
		assert.Zero(t, a.Score)
	}
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
