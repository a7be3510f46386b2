package scores

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/redistest"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// store is what both stores do.
type store interface {
	Add(ctx context.Context, key string, w float64, now time.Time) (float64, error)
	Get(key string, now time.Time) float64
}

// stores returns a Memory and a Redis store of one half-life.
func stores(t *testing.T, hl time.Duration) map[string]store {
	t.Helper()
	m, err := NewMemory(hl, 10_000)
	require.NoError(t, err)
	srv := redistest.Start(t)
	r, err := NewRedis(srv.Client(), fmt.Sprintf("scores-%d:", rand.Int64()), hl, 10_000)
	require.NoError(t, err)
	return map[string]store{"memory": m, "redis": r}
}

// TestDecay: a score halves every half-life, signals add up, a clock
// stepping back undoes no decay, and a score that has decayed below
// Forgotten reads 0; alike on both stores, on a virtual clock.
func TestDecay(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t, time.Minute) {
		t.Run(name, func(t *testing.T) {
			v, err := s.Add(ctx, "a", 8, t0)
			require.NoError(t, err)
			assert.Equal(t, 8.0, v)
			assert.Equal(t, 8.0, s.Get("a", t0))
			assert.InEpsilon(t, 4.0, s.Get("a", t0.Add(time.Minute)), 1e-12)
			assert.InEpsilon(t, 2.0, s.Get("a", t0.Add(2*time.Minute)), 1e-12)
			v, err = s.Add(ctx, "a", 1, t0.Add(time.Minute))
			require.NoError(t, err)
			assert.InEpsilon(t, 5.0, v, 1e-12, "decayed to 4, plus 1")
			v, err = s.Add(ctx, "a", 1, t0) // a minute back
			require.NoError(t, err)
			assert.InEpsilon(t, 6.0, v, 1e-12, "added at the last signal's time, not before it")
			assert.Zero(t, s.Get("a", t0.Add(20*time.Minute)), "6 / 2^19 is forgotten")
			assert.Zero(t, s.Get("never", t0))
			_, err = s.Add(ctx, "a", -1, t0)
			assert.Error(t, err, "a negative weight")
			_, err = s.Add(ctx, "a", math.NaN(), t0)
			assert.Error(t, err, "NaN")
			_, err = s.Add(ctx, "a", MaxWeight+1, t0)
			assert.Error(t, err, "above MaxWeight")
		})
	}
}

// TestRedisMatchesMemory: random histories of signals give the same
// scores on both stores, to 1e-12.
func TestRedisMatchesMemory(t *testing.T) {
	ctx := context.Background()
	ss := stores(t, 10*time.Second)
	m, r := ss["memory"], ss["redis"]
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	for i := range 2000 {
		now = now.Add(time.Duration(rng.Int64N(int64(5 * time.Second))))
		if rng.IntN(10) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(int64(time.Second)))) // steps back
		}
		key := fmt.Sprintf("k%d", rng.IntN(20))
		w := float64(rng.IntN(5)) + rng.Float64()
		mv, err := m.Add(ctx, key, w, now)
		require.NoError(t, err)
		rv, err := r.Add(ctx, key, w, now)
		require.NoError(t, err)
		require.InEpsilon(t, mv, rv, 1e-12, "step %d", i)
		require.InEpsilon(t, m.Get(key, now.Add(time.Second)), r.Get(key, now.Add(time.Second)), 1e-12, "step %d: the copy in process", i)
	}
}

// TestRedisAtomic: two app servers (two clients) adding at once lose no
// signal, and the key's TTL is when the score is forgotten.
func TestRedisAtomic(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("atomic-%d:", rand.Int64())
	var servers []*Redis
	for range 2 {
		c := redis.NewClient(srv.Options())
		t.Cleanup(func() { _ = c.Close() })
		r, err := NewRedis(c, prefix, time.Hour, 100)
		require.NoError(t, err)
		servers = append(servers, r)
	}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := servers[i%2].Add(ctx, "k", 1, t0) // one time: no decay between them
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	v, err := servers[0].Add(ctx, "k", 0, t0)
	require.NoError(t, err)
	assert.Equal(t, 200.0, v, "every signal counted")
	ttl, err := srv.Client().PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	want := time.Duration(lifetime(200, time.Hour.Microseconds())) * time.Microsecond
	assert.InDelta(t, float64(want), float64(ttl), float64(2*time.Second), "forgotten when it decays below %v", Forgotten)

	// Redis TIME when the signal is not dated.
	v, err = servers[1].Add(ctx, "now", 2, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 2.0, v)
	assert.InEpsilon(t, 2.0, servers[1].Get("now", time.Now()), 1e-3)
	assert.Zero(t, servers[0].Get("now", time.Now()), "the other server sees it at its own next signal")
}

// TestMemoryBounded: a flood of distinct keys keeps the store within its
// bound and evicts its own kind, not the client that scored high.
func TestMemoryBounded(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemory(time.Hour, 1600)
	require.NoError(t, err)
	_, err = m.Add(ctx, "scanner", 50, t0)
	require.NoError(t, err)
	for i := range 100_000 {
		_, err := m.Add(ctx, fmt.Sprintf("flood-%d", i), 1, t0)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, m.Len(), 1600)
	assert.Equal(t, 50.0, m.Get("scanner", t0), "the high score survives the flood")
	_, err = NewMemory(time.Hour, 0)
	assert.Error(t, err)
	_, err = NewMemory(0, 10)
	assert.Error(t, err)
}

func BenchmarkMemoryGet(b *testing.B) {
	m, err := NewMemory(time.Minute, 10_000)
	require.NoError(b, err)
	_, err = m.Add(context.Background(), "k", 3, t0)
	require.NoError(b, err)
	now := t0.Add(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if m.Get("k", now) == 0 {
			b.Fatal("no score")
		}
	}
}

// lifetime is how long, in µs, a score of v takes to decay below
// Forgotten under a half-life of hl µs: the TTL add.lua gives its key.
func lifetime(v float64, hl int64) int64 {
	if v <= Forgotten {
		return 0
	}
	return int64(math.Ceil(float64(hl) * math.Log2(v/Forgotten)))
}
