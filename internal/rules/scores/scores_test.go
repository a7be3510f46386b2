package scores

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// store is what both stores do.
type store interface {
	Add(ctx context.Context, key string, w float64, now time.Time) (float64, error)
	Get(key string, now time.Time) float64
}

// stores returns a Memory and a Redis store of one half-life. The Redis
// store's Add flushes before it returns, so that what it returns and Get
// reads is the score Redis computed.
func stores(t *testing.T, hl time.Duration) map[string]store {
	t.Helper()
	m, err := NewMemory(hl, 10_000)
	require.NoError(t, err)
	srv := redistest.Start(t)
	r, err := NewRedis(srv.Client(), fmt.Sprintf("scores-%d:", rand.Int64()), hl, 10_000)
	require.NoError(t, err)
	return map[string]store{"memory": m, "redis": flushing{r}}
}

// flushing is a Redis store whose Add is flushed to Redis before it
// returns: the score it returns is Redis's reply.
type flushing struct{ *Redis }

func (f flushing) Add(ctx context.Context, key string, w float64, now time.Time) (float64, error) {
	if _, err := f.Redis.Add(ctx, key, w, now); err != nil {
		return 0, err
	}
	if _, err := f.Flush(ctx); err != nil {
		return 0, err
	}
	return f.Get(key, now), nil
}

// stored reads key's score as Redis holds it (add.lua's '<dd'), at its
// last signal.
func stored(t *testing.T, c redis.UniversalClient, key string) float64 {
	t.Helper()
	b, err := c.Get(context.Background(), key).Bytes()
	require.NoError(t, err)
	require.Len(t, b, 16)
	return math.Float64frombits(binary.LittleEndian.Uint64(b[:8]))
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
// scores on both stores, to 1e-12, flushed to Redis after every signal,
// or after a random number of them (the weights queued between flushes
// add up as the signals one by one would have), with clock step-backs.
func TestRedisMatchesMemory(t *testing.T) {
	ctx := context.Background()
	for _, every := range []int{1, 0} {
		t.Run(fmt.Sprintf("flushed every %d", every), func(t *testing.T) {
			m, err := NewMemory(10*time.Second, 10_000)
			require.NoError(t, err)
			srv := redistest.Start(t)
			r, err := NewRedis(srv.Client(), fmt.Sprintf("match-%d:", rand.Int64()), 10*time.Second, 10_000)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(1, uint64(every)))
			now := t0
			touched := map[string]bool{}
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
				require.InEpsilon(t, mv, rv, 1e-12, "step %d: the copy", i)
				touched[key] = true
				if every == 1 || rng.IntN(7) == 0 {
					_, err := r.Flush(ctx)
					require.NoError(t, err)
					for k := range touched {
						// What Redis holds, at its last signal, is the copy's.
						e, ok := r.copy.entry(k)
						require.True(t, ok)
						require.InEpsilon(t, e.v, stored(t, srv.Client(), r.prefix+k), 1e-12, "step %d: Redis's %s", i, k)
						require.InEpsilon(t, m.Get(k, now.Add(time.Second)), r.Get(k, now.Add(time.Second)), 1e-12, "step %d: %s", i, k)
					}
					clear(touched)
				}
			}
		})
	}
}

// TestRedisWrittenBehind: a flood of signals for a key costs Redis one
// script a FlushEvery, not one a signal, and every one of them counts;
// signals are counted, and answered, while Redis is frozen, and shared
// once it thaws.
func TestRedisWrittenBehind(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	sent := redistest.CountScripts(c)
	r, err := NewRedis(c, fmt.Sprintf("behind-%d:", rand.Int64()), time.Hour, 1000)
	require.NoError(t, err)
	start := time.Now()
	for range 20_000 {
		_, err := r.Add(ctx, "flood", 1, t0)
		require.NoError(t, err)
	}
	took := time.Since(start)
	waitIdle(t, r)
	ran := sent()
	// A flush a FlushEvery while the signals come, and one after: a slow
	// machine makes took longer, and the bound with it.
	assert.LessOrEqual(t, ran, int64(took/FlushEvery)+3, "one script a flush for %v of signals", took)
	assert.Equal(t, 20_000.0, stored(t, c, r.prefix+"flood"), "every signal counted in Redis")
	assert.Equal(t, 20_000.0, r.Get("flood", t0))
	t.Logf("20,000 signals in %v: %d scripts", took, ran)

	if srv.External() {
		return
	}
	srv.Freeze()
	frozen := time.Now()
	for range 100 {
		_, err := r.Add(ctx, "frozen", 1, t0)
		require.NoError(t, err)
	}
	assert.Less(t, time.Since(frozen), testwait.D(time.Second), "no Add waits for Redis")
	assert.Equal(t, 100.0, r.Get("frozen", t0), "counted in the copy meanwhile")
	srv.Thaw()
	waitIdle(t, r)
	assert.Equal(t, 100.0, stored(t, c, r.prefix+"frozen"), "shared once thawed")
}

// TestRedisShared: a flush brings to each server the score every
// server's signals made, and OnShared hears it.
func TestRedisShared(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("shared-%d:", rand.Int64())
	a, err := NewRedis(srv.Client(), prefix, time.Hour, 100)
	require.NoError(t, err)
	b, err := NewRedis(srv.Client(), prefix, time.Hour, 100)
	require.NoError(t, err)
	type heard struct{ before, after float64 }
	var mu sync.Mutex
	var got []heard
	b.OnShared(func(key string, before, after float64) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "k", key)
		got = append(got, heard{before, after})
	}, nil)
	_, err = a.Add(ctx, "k", 30, t0)
	require.NoError(t, err)
	_, err = a.Flush(ctx)
	require.NoError(t, err)
	v, err := b.Add(ctx, "k", 1, t0)
	require.NoError(t, err)
	assert.Equal(t, 1.0, v, "b has not flushed: its own signal only")
	_, err = b.Flush(ctx)
	require.NoError(t, err)
	assert.Equal(t, 31.0, b.Get("k", t0), "b's copy takes the shared score")
	mu.Lock()
	assert.Equal(t, []heard{{1, 31}}, got)
	mu.Unlock()
}

// TestRedisSync: a Sync sends a key's signals at once and returns the
// score every server's made; while Redis is frozen, one Sync waits
// SyncTimeout and the next ones, for SyncPause, none, every signal still
// counting in the copy, and all of them in Redis once it thaws.
func TestRedisSync(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("sync-%d:", rand.Int64())
	opts := srv.Options()
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	a, err := NewRedis(c, prefix, time.Hour, 100)
	require.NoError(t, err)
	b, err := NewRedis(c, prefix, time.Hour, 100)
	require.NoError(t, err)
	require.NoError(t, addScript.Load(ctx, c).Err()) // no NOSCRIPT to count
	sent := redistest.CountScripts(c)
	// No flusher while a's Syncs are counted: one that ran between an Add
	// and its Sync (a slow machine's pause of FlushEvery) would send the
	// weight, and leave the Sync nothing to send.
	a.running.Store(true)
	for range 30 {
		_, err := a.Add(ctx, "k", 1, t0)
		require.NoError(t, err)
		_, ok := a.Sync(ctx, "k")
		require.True(t, ok)
	}
	a.running.Store(false)
	assert.Equal(t, int64(30), sent(), "a script a Sync")
	_, err = b.Add(ctx, "k", 1, t0)
	require.NoError(t, err)
	v, ok := b.Sync(ctx, "k")
	require.True(t, ok)
	assert.Equal(t, 31.0, v, "the score both servers' signals made")
	assert.Equal(t, 31.0, b.Get("k", t0))
	_, ok = b.Sync(ctx, "k")
	assert.False(t, ok, "nothing queued: nothing sent")

	if srv.External() {
		return
	}
	var errs []error
	var mu sync.Mutex
	a.OnShared(nil, func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })
	srv.Freeze()
	start := time.Now()
	_, err = a.Add(ctx, "frozen", 1, t0)
	require.NoError(t, err)
	_, ok = a.Sync(ctx, "frozen")
	first := time.Since(start)
	assert.False(t, ok, "timed out")
	assert.GreaterOrEqual(t, first, SyncTimeout)
	assert.Less(t, first, testwait.D(2*time.Second), "bounded by SyncTimeout")
	start = time.Now()
	for range 99 {
		_, err := a.Add(ctx, "frozen", 1, t0)
		require.NoError(t, err)
		_, ok := a.Sync(ctx, "frozen")
		require.False(t, ok, "paused")
	}
	// Had each waited SyncTimeout, they would have taken 99 times that.
	assert.Less(t, time.Since(start), testwait.D(SyncTimeout), "no wait while paused")
	assert.Equal(t, 100.0, a.Get("frozen", t0), "counted in the copy")
	srv.Thaw()
	waitIdle(t, a)
	assert.InDelta(t, 99.5, stored(t, c, prefix+"frozen"), 0.5, "in Redis once thawed (the timed-out script's one, if Redis read it before the client left)")
	mu.Lock()
	assert.NotEmpty(t, errs, "the failure heard")
	mu.Unlock()
}

// waitIdle waits until r's flusher has sent everything and stopped.
func waitIdle(t *testing.T, r *Redis) {
	t.Helper()
	testwait.For(t, 30*time.Second, 10*time.Millisecond, func() bool { return !r.running.Load() && !r.queued() }, "the flusher idle")
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
		// No flusher of its own: one that flushed before the test's
		// Flush (200 Adds outlasting FlushEvery on a slow machine) would
		// leave that Flush nothing to send, and the copy as it was then.
		r.running.Store(true)
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
	for _, s := range servers {
		_, err := s.Flush(ctx)
		require.NoError(t, err)
		s.running.Store(false)
	}
	assert.Equal(t, 200.0, stored(t, srv.Client(), prefix+"k"), "every signal counted")
	assert.Equal(t, 200.0, servers[1].Get("k", t0), "the last to flush has them all")
	ttl, err := srv.Client().PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	want := time.Duration(lifetime(200, time.Hour.Microseconds())) * time.Microsecond
	assert.InDelta(t, float64(want), float64(ttl), float64(2*time.Second), "forgotten when it decays below %v", Forgotten)

	// time.Now when the signal is not dated.
	v, err := servers[1].Add(ctx, "now", 2, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 2.0, v)
	assert.InEpsilon(t, 2.0, servers[1].Get("now", time.Now()), 1e-3)
	assert.Zero(t, servers[0].Get("now", time.Now()), "the other server sees it at its own next flush of the key")
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

// BenchmarkRedisSignal is a signal as a Tracker scores it on Redis (Add,
// then Sync), one at a time and from many goroutines on one key (a
// flood), with the scripts Redis ran per signal.
func BenchmarkRedisSignal(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	b.Cleanup(func() { _ = c.Close() })
	for _, parallel := range []bool{false, true} {
		name := "one-at-a-time"
		if parallel {
			name = "flood-one-key"
		}
		b.Run(name, func(b *testing.B) {
			r, err := NewRedis(c, fmt.Sprintf("bench-%d:", rand.Int64()), time.Hour, 1000)
			require.NoError(b, err)
			signal := func() {
				if _, err := r.Add(ctx, "k", 1, time.Time{}); err != nil {
					b.Error(err)
				}
				r.Sync(ctx, "k")
			}
			before := redistest.Scripts(b, c)
			b.ReportAllocs()
			b.ResetTimer()
			if parallel {
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						signal()
					}
				})
			} else {
				for range b.N {
					signal()
				}
			}
			b.StopTimer()
			ran := redistest.Scripts(b, c) - before
			b.ReportMetric(float64(ran)/float64(b.N), "scripts/op")
		})
	}
}

// TestRedisCluster: on a Redis Cluster, a flush's pipeline reaches every
// slot of its keys, and Syncs too: 200 keys, each with its signals, are
// each what one process would hold.
func TestRedisCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	c := cl.Client()
	prefix := fmt.Sprintf("cluster-%d:", rand.Int64())
	a, err := NewRedis(c, prefix, time.Hour, 1000)
	require.NoError(t, err)
	b, err := NewRedis(c, prefix, time.Hour, 1000)
	require.NoError(t, err)
	for i := range 200 {
		key := fmt.Sprintf("k%d", i)
		for range i%5 + 1 {
			_, err := a.Add(ctx, key, 1, t0)
			require.NoError(t, err)
		}
	}
	n, err := a.Flush(ctx)
	require.NoError(t, err)
	assert.Equal(t, 200, n)
	for i := range 200 {
		key := fmt.Sprintf("k%d", i)
		assert.Equal(t, float64(i%5+1), stored(t, c, prefix+key), key)
		_, err := b.Add(ctx, key, 1, t0)
		require.NoError(t, err)
		v, ok := b.Sync(ctx, key)
		require.True(t, ok, key)
		assert.Equal(t, float64(i%5+2), v, "%s: both servers' signals", key)
	}
}

// TestRedisFull: a Redis that refuses writes (maxmemory reached under
// noeviction) fails a Sync at once, and the signals after it, for
// SyncPause, neither wait nor are lost to this server: they count in its
// copy, and the error is heard.
func TestRedisFull(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("REDIS_URL: the test would fill a server it does not own")
	}
	c := srv.Client()
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { _ = c.ConfigSet(ctx, "maxmemory", "0").Err() })
	r, err := NewRedis(c, fmt.Sprintf("full-%d:", rand.Int64()), time.Hour, 100)
	require.NoError(t, err)
	var heard []error
	var mu sync.Mutex
	r.OnShared(nil, func(err error) { mu.Lock(); heard = append(heard, err); mu.Unlock() })
	start := time.Now()
	for range 50 {
		_, err := r.Add(ctx, "k", 1, t0)
		require.NoError(t, err)
		_, ok := r.Sync(ctx, "k")
		require.False(t, ok)
	}
	assert.Less(t, time.Since(start), testwait.D(SyncTimeout), "refused at once, then paused")
	assert.Equal(t, 50.0, r.Get("k", t0), "counted on this server")
	mu.Lock()
	require.NotEmpty(t, heard)
	assert.ErrorContains(t, heard[0], "OOM")
	mu.Unlock()
}

// TestRedisQueueBounded: a flood of distinct keys keeps what waits for
// Redis within the bound, as the copy is, and the key queued before the
// flood still reaches Redis whole.
func TestRedisQueueBounded(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	prefix := fmt.Sprintf("bounded-%d:", rand.Int64())
	r, err := NewRedis(c, prefix, time.Hour, 160)
	require.NoError(t, err)
	_, err = r.Add(ctx, "scanner", 50, t0)
	require.NoError(t, err)
	for i := range 10_000 {
		_, err := r.Add(ctx, fmt.Sprintf("flood-%d", i), 1, t0)
		require.NoError(t, err)
	}
	queued := 0
	for i := range r.queues {
		q := &r.queues[i]
		q.mu.Lock()
		assert.LessOrEqual(t, len(q.m), q.max)
		queued += len(q.m)
		q.mu.Unlock()
	}
	assert.LessOrEqual(t, queued, 160, "queued")
	assert.LessOrEqual(t, r.copy.Len(), 160, "the copy")
	waitIdle(t, r)
	assert.Equal(t, 50.0, stored(t, c, prefix+"scanner"))
}
