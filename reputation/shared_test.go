package reputation_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/rules/scores"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/rediswatch"
	"github.com/apigate/ratelimit/reputation"
)

// sharedOn returns a set of scores shared through c under keys
// prefix+":s:"+key, halving every hl, with a copy of at most maxKeys: as
// a Tracker keeps its clients' scores with rediswatch.NewScores.
func sharedOn(tb testing.TB, c redis.UniversalClient, prefix string, hl time.Duration, maxKeys int) *reputation.Shared {
	tb.Helper()
	remote, err := rediswatch.NewScores(c, rediswatch.WithKey(prefix))
	require.NoError(tb, err)
	r, err := reputation.NewShared(remote, "s:", hl, maxKeys)
	require.NoError(tb, err)
	return r
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

// TestSharedMatchesMemory: random histories of signals give the same
// scores on both stores, to 1e-12, flushed to Redis after every signal,
// or after a random number of them (the weights queued between flushes
// add up as the signals one by one would have), with clock step-backs.
func TestSharedMatchesMemory(t *testing.T) {
	ctx := context.Background()
	for _, every := range []int{1, 0} {
		t.Run(fmt.Sprintf("flushed every %d", every), func(t *testing.T) {
			m, err := scores.NewMemory(10*time.Second, 10_000)
			require.NoError(t, err)
			srv := redistest.Start(t)
			prefix := fmt.Sprintf("match-%d", rand.Int64())
			r := sharedOn(t, srv.Client(), prefix, 10*time.Second, 10_000)
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
						require.InEpsilon(t, r.Last(k), stored(t, srv.Client(), prefix+":s:"+k), 1e-12, "step %d: Redis's %s", i, k)
						require.InEpsilon(t, m.Get(k, now.Add(time.Second)), r.Get(k, now.Add(time.Second)), 1e-12, "step %d: %s", i, k)
					}
					clear(touched)
				}
			}
		})
	}
}

// TestSharedWrittenBehind: a flood of signals for a key costs Redis one
// script a reputation.FlushEvery, not one a signal, and every one of them counts;
// signals are counted, and answered, while Redis is frozen, and shared
// once it thaws.
func TestSharedWrittenBehind(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	sent := redistest.CountScripts(c)
	prefix := fmt.Sprintf("behind-%d", rand.Int64())
	r := sharedOn(t, c, prefix, time.Hour, 1000)
	start := time.Now()
	for range 20_000 {
		_, err := r.Add(ctx, "flood", 1, t0)
		require.NoError(t, err)
	}
	took := time.Since(start)
	waitIdle(t, r)
	ran := sent()
	// A flush a reputation.FlushEvery while the signals come, and one after: a slow
	// machine makes took longer, and the bound with it.
	assert.LessOrEqual(t, ran, int64(took/reputation.FlushEvery)+3, "one script a flush for %v of signals", took)
	assert.Equal(t, 20_000.0, stored(t, c, prefix+":s:flood"), "every signal counted in Redis")
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
	assert.Equal(t, 100.0, stored(t, c, prefix+":s:frozen"), "shared once thawed")
}

// TestSharedAcrossServers: a flush brings to each server the score every
// server's signals made, and OnShared hears it.
func TestSharedAcrossServers(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("shared-%d", rand.Int64())
	a := sharedOn(t, srv.Client(), prefix, time.Hour, 100)
	b := sharedOn(t, srv.Client(), prefix, time.Hour, 100)
	type heard struct{ before, after float64 }
	var mu sync.Mutex
	var got []heard
	b.OnShared(func(key string, before, after float64) {
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, "k", key)
		got = append(got, heard{before, after})
	}, nil)
	_, err := a.Add(ctx, "k", 30, t0)
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

// TestSharedSync: a Sync sends a key's signals at once and returns the
// score every server's made; while Redis is frozen, one Sync waits
// reputation.SyncTimeout and the next ones, for SyncPause, none, every signal still
// counting in the copy, and all of them in Redis once it thaws.
func TestSharedSync(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("sync-%d", rand.Int64())
	opts := srv.Options()
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	a := sharedOn(t, c, prefix, time.Hour, 100)
	b := sharedOn(t, c, prefix, time.Hour, 100)
	_, err := a.Add(ctx, "warm", 1, t0) // loads the script: no NOSCRIPT to count
	require.NoError(t, err)
	_, ok := a.Sync(ctx, "warm")
	require.True(t, ok)
	sent := redistest.CountScripts(c)
	// No flusher while a's Syncs are counted: one that ran between an Add
	// and its Sync (a slow machine's pause of reputation.FlushEvery) would send the
	// weight, and leave the Sync nothing to send.
	a.HoldFlusher(true)
	for range 30 {
		_, err := a.Add(ctx, "k", 1, t0)
		require.NoError(t, err)
		_, ok := a.Sync(ctx, "k")
		require.True(t, ok)
	}
	a.HoldFlusher(false)
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
	assert.GreaterOrEqual(t, first, reputation.SyncTimeout)
	assert.Less(t, first, testwait.D(2*time.Second), "bounded by reputation.SyncTimeout")
	start = time.Now()
	for range 99 {
		_, err := a.Add(ctx, "frozen", 1, t0)
		require.NoError(t, err)
		_, ok := a.Sync(ctx, "frozen")
		require.False(t, ok, "paused")
	}
	// Had each waited reputation.SyncTimeout, they would have taken 99 times that.
	assert.Less(t, time.Since(start), testwait.D(reputation.SyncTimeout), "no wait while paused")
	assert.Equal(t, 100.0, a.Get("frozen", t0), "counted in the copy")
	srv.Thaw()
	waitIdle(t, a)
	assert.InDelta(t, 99.5, stored(t, c, prefix+":s:frozen"), 0.5, "in Redis once thawed (the timed-out script's one, if Redis read it before the client left)")
	mu.Lock()
	assert.NotEmpty(t, errs, "the failure heard")
	mu.Unlock()
}

// waitIdle waits until r's flusher has sent everything and stopped.
func waitIdle(t *testing.T, r *reputation.Shared) {
	t.Helper()
	testwait.For(t, 30*time.Second, 10*time.Millisecond, r.Idle, "the flusher idle")
}

// TestSharedAtomic: two app servers (two clients) adding at once lose no
// signal, and the key's TTL is when the score is forgotten.
func TestSharedAtomic(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	prefix := fmt.Sprintf("atomic-%d", rand.Int64())
	var servers []*reputation.Shared
	for range 2 {
		c := redis.NewClient(srv.Options())
		t.Cleanup(func() { _ = c.Close() })
		r := sharedOn(t, c, prefix, time.Hour, 100)
		servers = append(servers, r)
		// No flusher of its own: one that flushed before the test's
		// Flush (200 Adds outlasting reputation.FlushEvery on a slow machine) would
		// leave that Flush nothing to send, and the copy as it was then.
		r.HoldFlusher(true)
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
		s.HoldFlusher(false)
	}
	assert.Equal(t, 200.0, stored(t, srv.Client(), prefix+":s:k"), "every signal counted")
	assert.Equal(t, 200.0, servers[1].Get("k", t0), "the last to flush has them all")
	ttl, err := srv.Client().PTTL(ctx, prefix+":s:k").Result()
	require.NoError(t, err)
	want := time.Duration(lifetime(200, time.Hour.Microseconds())) * time.Microsecond
	assert.InDelta(t, float64(want), float64(ttl), float64(2*time.Second), "forgotten when it decays below %v", scores.Forgotten)

	// time.Now when the signal is not dated.
	v, err := servers[1].Add(ctx, "now", 2, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 2.0, v)
	assert.InEpsilon(t, 2.0, servers[1].Get("now", time.Now()), 1e-3)
	assert.Zero(t, servers[0].Get("now", time.Now()), "the other server sees it at its own next flush of the key")
}

// BenchmarkSharedSignal is a signal as a Tracker scores it on Redis (Add,
// then Sync), one at a time and from many goroutines on one key (a
// flood), with the scripts Redis ran per signal.
func BenchmarkSharedSignal(b *testing.B) {
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
			r := sharedOn(b, c, fmt.Sprintf("bench-%d", rand.Int64()), time.Hour, 1000)
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

// TestSharedCluster: on a Redis Cluster, a flush's pipeline reaches every
// slot of its keys, and Syncs too: 200 keys, each with its signals, are
// each what one process would hold.
func TestSharedCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	c := cl.Client()
	prefix := fmt.Sprintf("cluster-%d", rand.Int64())
	a := sharedOn(t, c, prefix, time.Hour, 1000)
	b := sharedOn(t, c, prefix, time.Hour, 1000)
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
		assert.Equal(t, float64(i%5+1), stored(t, c, prefix+":s:"+key), key)
		_, err := b.Add(ctx, key, 1, t0)
		require.NoError(t, err)
		v, ok := b.Sync(ctx, key)
		require.True(t, ok, key)
		assert.Equal(t, float64(i%5+2), v, "%s: both servers' signals", key)
	}
}

// TestSharedRedisFull: a Redis that refuses writes (maxmemory reached under
// noeviction) fails a Sync at once, and the signals after it, for
// SyncPause, neither wait nor are lost to this server: they count in its
// copy, and the error is heard.
func TestSharedRedisFull(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("REDIS_URL: the test would fill a server it does not own")
	}
	c := srv.Client()
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { _ = c.ConfigSet(ctx, "maxmemory", "0").Err() })
	r := sharedOn(t, c, fmt.Sprintf("full-%d", rand.Int64()), time.Hour, 100)
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
	assert.Less(t, time.Since(start), testwait.D(reputation.SyncTimeout), "refused at once, then paused")
	assert.Equal(t, 50.0, r.Get("k", t0), "counted on this server")
	mu.Lock()
	require.NotEmpty(t, heard)
	assert.ErrorContains(t, heard[0], "OOM")
	mu.Unlock()
}

// TestSharedQueueBounded: a flood of distinct keys keeps what waits for
// Redis within the bound, as the copy is, and the key queued before the
// flood still reaches Redis whole.
func TestSharedQueueBounded(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client()
	prefix := fmt.Sprintf("bounded-%d", rand.Int64())
	r := sharedOn(t, c, prefix, time.Hour, 160)
	_, err := r.Add(ctx, "scanner", 50, t0)
	require.NoError(t, err)
	for i := range 10_000 {
		_, err := r.Add(ctx, fmt.Sprintf("flood-%d", i), 1, t0)
		require.NoError(t, err)
	}
	queued, bounded := r.Queued()
	assert.True(t, bounded, "every shard of the queue within its bound")
	assert.LessOrEqual(t, queued, 160, "queued")
	assert.LessOrEqual(t, r.CopyLen(), 160, "the copy")
	waitIdle(t, r)
	assert.Equal(t, 50.0, stored(t, c, prefix+":s:scanner"))
}

// lifetime is how long, in µs, a score of v takes to decay below
// scores.Forgotten under a half-life of hl µs: the TTL
// rediswatch's scores.lua gives its key.
func lifetime(v float64, hl int64) int64 {
	if v <= scores.Forgotten {
		return 0
	}
	return int64(math.Ceil(float64(hl) * math.Log2(v/scores.Forgotten)))
}

// fakeScores is a SharedScores in process that holds the scores other
// servers made (no decay: its tests keep one time), fails the adds of
// the keys in fail, and replies errs errors when errs > 0.
type fakeScores struct {
	mu     sync.Mutex
	scores map[string]float64
	fail   map[string]bool
	errs   int
	calls  [][]string // the keys of each call
}

func (f *fakeScores) AddScores(_ context.Context, _ time.Duration, keys []string, weights []float64, _ []time.Time, scores []float64) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, slices.Clone(keys))
	if f.errs > 0 {
		return make([]error, f.errs)
	}
	var errs []error
	for i, k := range keys {
		if f.fail[k] {
			if errs == nil {
				errs = make([]error, len(keys))
			}
			errs[i] = errors.New("refused")
			continue
		}
		f.scores[k] += weights[i]
		scores[i] = f.scores[k]
	}
	return errs
}

// TestSharedPerKeyErrors: in a flush's batch, the key whose add failed
// keeps the copy's score, and the others take the shared one; a Sync
// that fails returns false and pauses the next; a reply whose errors
// are not one per key fails every add.
func TestSharedPerKeyErrors(t *testing.T) {
	ctx := context.Background()
	remote := &fakeScores{scores: map[string]float64{"s:good": 10, "s:bad": 10}, fail: map[string]bool{"s:bad": true}}
	r, err := reputation.NewShared(remote, "s:", time.Hour, 100)
	require.NoError(t, err)
	r.HoldFlusher(true)
	var mu sync.Mutex
	heard := map[string]float64{}
	var errs []error
	r.OnShared(func(key string, _, after float64) { mu.Lock(); heard[key] = after; mu.Unlock() },
		func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })
	for _, k := range []string{"good", "bad"} {
		_, err := r.Add(ctx, k, 1, t0)
		require.NoError(t, err)
	}
	n, err := r.Flush(ctx)
	assert.Equal(t, 2, n)
	require.ErrorContains(t, err, "refused")
	require.Len(t, remote.calls, 1, "one AddScores for the batch")
	assert.ElementsMatch(t, []string{"s:good", "s:bad"}, remote.calls[0])
	mu.Lock()
	assert.Equal(t, map[string]float64{"good": 11}, heard, "the failed key is not heard")
	mu.Unlock()
	assert.Equal(t, 11.0, r.Get("good", t0), "the shared score")
	assert.Equal(t, 1.0, r.Get("bad", t0), "the copy's, the add having failed")

	// A Sync that fails: false, and the next ones send nothing for a while.
	_, err = r.Add(ctx, "bad", 1, t0)
	require.NoError(t, err)
	_, ok := r.Sync(ctx, "bad")
	assert.False(t, ok)
	_, err = r.Add(ctx, "good", 1, t0)
	require.NoError(t, err)
	calls := len(remote.calls)
	_, ok = r.Sync(ctx, "good")
	assert.False(t, ok, "paused after a failure")
	assert.Len(t, remote.calls, calls, "nothing sent while paused")

	// One error for two keys: every add failed.
	remote2 := &fakeScores{scores: map[string]float64{}, errs: 1}
	r2, err := reputation.NewShared(remote2, "s:", time.Hour, 100)
	require.NoError(t, err)
	r2.HoldFlusher(true)
	for _, k := range []string{"a", "b"} {
		_, err := r2.Add(ctx, k, 1, t0)
		require.NoError(t, err)
	}
	_, err = r2.Flush(ctx)
	assert.ErrorContains(t, err, "1 errors for 2 keys")
}
