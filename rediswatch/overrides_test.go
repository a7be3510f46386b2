package rediswatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/overrides"
	"github.com/apigate/ratelimit/rediswatch"
)

// within is the bound: every server picks a change up in a second.
var within = testwait.D(time.Second)

var keys atomic.Int64

// newKey returns a hash key of the test's own, so that tests sharing a
// REDIS_URL server do not meet.
func newKey() string { return fmt.Sprintf("rl:overrides:test%d", keys.Add(1)) }

// openOverrides returns an Overrides of key logging to its own buffer, closed when the
// test ends.
func openOverrides(t testing.TB, c redis.UniversalClient, key string, opts ...rediswatch.Option) (*rediswatch.Overrides, *syncbuf.Buffer) {
	t.Helper()
	logs := new(syncbuf.Buffer)
	opts = append([]rediswatch.Option{rediswatch.WithKey(key),
		rediswatch.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	w, err := rediswatch.NewOverrides(context.Background(), c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w, logs
}

var api = core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}

// limitOf returns the limit w puts on api; -1 (no limit ever wanted) if
// Adjust fails.
func limitOf(w *rediswatch.Overrides) int64 {
	p, err := w.Adjust(context.Background(), "c", api)
	if err != nil {
		return -1
	}
	return p.Limit
}

// waitLimit waits, in a bounded loop, until every watcher puts want on
// api, and returns how long that took.
func waitLimit(t *testing.T, want int64, ws ...*rediswatch.Overrides) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		all := true
		for _, w := range ws {
			all = all && limitOf(w) == want
		}
		if all {
			return time.Since(start)
		}
		if time.Since(start) > 5*within {
			for i, w := range ws {
				t.Logf("watcher %d: limit %d", i, limitOf(w))
			}
			t.Fatalf("limit %d not in force on every server after %v", want, 5*within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitReads waits, in a bounded loop, until w has run n more reads.
func waitReads(t *testing.T, w *rediswatch.Overrides, n int64) {
	t.Helper()
	from := w.Reads()
	require.Eventually(t, func() bool { return w.Reads() >= from+n }, testwait.D(10*time.Second), 5*time.Millisecond, "%d more reads", n)
}

func TestWatcherTwoServersWithinASecond(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	a, _ := openOverrides(t, srv.Client(), key)
	b, _ := openOverrides(t, srv.Client(), key)
	ctx := context.Background()

	// A Limiter on each server, over a store of its own.
	limiters := make([]*core.Limiter, 2)
	for i, w := range []*rediswatch.Overrides{a, b} {
		store, err := memstore.New()
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Close() })
		limiters[i], err = core.NewLimiter(store, []core.Policy{api}, core.WithPolicySource(w))
		require.NoError(t, err)
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	d, err := limiters[1].AllowN(ctx, "client", 1, now)
	require.NoError(t, err)
	require.Equal(t, int64(100), d.Limit)

	start := time.Now()
	require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: 3}))
	assert.Equal(t, int64(3), limitOf(a), "in force on the server that wrote before Put returns")
	waitLimit(t, 3, a, b)
	took := time.Since(start)
	t.Logf("Put on A in force on B after %v", took)
	assert.Less(t, took, within)

	// The next request after the watcher saw it is decided by it.
	for i, l := range limiters {
		admitted := 0
		for range 10 {
			d, err := l.AllowN(ctx, "other", 1, now)
			require.NoError(t, err)
			assert.Equal(t, int64(3), d.Limit)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, 3, admitted, "server %d admits the override's limit", i)
	}

	// An operator's change by hand, as with redis-cli.
	raw := srv.Client()
	start = time.Now()
	require.NoError(t, raw.HSet(ctx, key, "api", "scale=0.5").Err())
	waitLimit(t, 50, a, b)
	took = time.Since(start)
	t.Logf("HSET by hand in force on both after %v", took)
	assert.Less(t, took, within)
	assert.Equal(t, map[string]overrides.Override{"api": {Scale: 0.5}}, b.Snapshot())

	require.NoError(t, raw.HDel(ctx, key, "api").Err())
	took = waitLimit(t, 100, a, b)
	assert.Less(t, took, within, "HDEL lifts the override")

	require.NoError(t, b.Put(ctx, "api", overrides.Override{Limit: 7}))
	assert.Less(t, waitLimit(t, 7, a, b), within)
	require.NoError(t, a.Delete(ctx, "api"))
	assert.Equal(t, int64(100), limitOf(a), "lifted on the server that deleted before Delete returns")
	assert.Less(t, waitLimit(t, 100, a, b), within)
	n, err := raw.HLen(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestWatcherMalformedFieldKeepsItsLastGoodValue(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	raw := srv.Client()
	ctx := context.Background()
	require.NoError(t, raw.HSet(ctx, key, "api", "limit=10", "other", "limit=20").Err())
	w, logs := openOverrides(t, srv.Client(), key)
	require.Equal(t, int64(10), limitOf(w), "loaded before New returns")

	require.NoError(t, raw.HSet(ctx, key, "api", "limit=ten", "other", "limit=21", "new", "scale=NaN").Err())
	require.NoError(t, w.Sync(ctx))
	assert.Equal(t, map[string]overrides.Override{"api": {Limit: 10}, "other": {Limit: 21}}, w.Snapshot(),
		"api keeps its last good value, other loads, new (never good) has none")
	require.NoError(t, w.Sync(ctx))
	waitReads(t, w, 2) // the goroutine's polls log nothing more either
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "field=api "), "logged once: %s", out)
	assert.Contains(t, out, `kept="limit=10"`)
	assert.Equal(t, 1, strings.Count(out, "field=new "), out)

	// A bad layer name, a negative limit, a value with a NUL: the same.
	require.NoError(t, raw.HSet(ctx, key, "bad name!", "limit=5", "other", "limit=-1", "nul", "\x00limit=1").Err())
	require.NoError(t, w.Sync(ctx))
	assert.Equal(t, map[string]overrides.Override{"api": {Limit: 10}, "other": {Limit: 21}}, w.Snapshot())
	out = logs.String()
	assert.Contains(t, out, `field="bad name!"`)
	assert.Contains(t, out, "field=other ")
	assert.Contains(t, out, "field=nul ")

	// Fixed: the field loads again; a field removed is removed.
	require.NoError(t, raw.HSet(ctx, key, "api", "limit=12").Err())
	require.NoError(t, raw.HDel(ctx, key, "other").Err())
	require.NoError(t, w.Sync(ctx))
	assert.Equal(t, map[string]overrides.Override{"api": {Limit: 12}}, w.Snapshot())
	// Broken again with the same bad value: logged again, as a new event.
	require.NoError(t, raw.HSet(ctx, key, "api", "limit=ten").Err())
	require.NoError(t, w.Sync(ctx))
	assert.Equal(t, 2, strings.Count(logs.String(), "field=api "))
	assert.Contains(t, logs.String(), `kept="limit=12"`)

	// Put refuses what Parse would, writing nothing.
	assert.ErrorIs(t, w.Put(ctx, "api", overrides.Override{Limit: -1}), core.ErrInvalidOption)
	assert.ErrorIs(t, w.Put(ctx, "bad name!", overrides.Override{Limit: 1}), core.ErrInvalidOption)
	assert.ErrorIs(t, w.Put(ctx, "api", overrides.Override{}), core.ErrInvalidOption)
	v, err := raw.HGet(ctx, key, "api").Result()
	require.NoError(t, err)
	assert.Equal(t, "limit=ten", v)
}

// TestWatcherOutage kills Redis twice: the overrides stay, each outage is
// logged once however many polls fail, and its end once.
func TestWatcherOutage(t *testing.T) {
	srv := redistest.StartWith(t, "--appendonly", "yes", "--appendfsync", "always")
	key := newKey()
	// A client that fails fast while Redis is down, so that polls fail
	// every interval rather than every few seconds of dial retries.
	opt := srv.Options()
	opt.MaxRetries, opt.DialerRetries = -1, 1
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	w, logs := openOverrides(t, c, key, rediswatch.WithPollInterval(20*time.Millisecond))
	ctx := context.Background()
	require.NoError(t, w.Put(ctx, "api", overrides.Override{Limit: 5}))
	for outage := 1; outage <= 2; outage++ {
		srv.Kill()
		waitReads(t, w, 5)
		assert.Equal(t, int64(5), limitOf(w), "kept through the outage")
		assert.Error(t, w.Sync(ctx))
		assert.Equal(t, outage, strings.Count(logs.String(), "cannot read the overrides"), "each outage is logged once")
		srv.Restart()
		require.Eventually(t, func() bool { return strings.Count(logs.String(), "from Redis again") == outage },
			testwait.D(10*time.Second), 5*time.Millisecond)
		assert.Equal(t, int64(5), limitOf(w))
	}
	assert.NotContains(t, logs.String(), "lost the overrides", "Redis kept its data")
}

// TestWatcherFrozenRedis freezes Redis: Adjust never waits for it, the
// overrides stay, and a change made once it thaws is followed.
func TestWatcherFrozenRedis(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	opt := srv.Options()
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	w, logs := openOverrides(t, c, key, rediswatch.WithPollInterval(20*time.Millisecond))
	ctx := context.Background()
	require.NoError(t, w.Put(ctx, "api", overrides.Override{Limit: 5}))
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	assert.Error(t, w.Sync(tctx), "a read of a frozen Redis fails by its context")
	start := time.Now()
	for range 1000 {
		require.Equal(t, int64(5), limitOf(w))
	}
	// One read of the frozen Redis would take the client's read timeout
	// (3 s); a thousand Adjusts that do no I/O take microseconds. The
	// bound between is wide enough for a busy machine.
	assert.Less(t, time.Since(start), time.Second, "Adjust does no I/O")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cannot read the overrides") },
		5*time.Second, 5*time.Millisecond)
	srv.Thaw()
	thawed = true
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "from Redis again") }, testwait.D(5*time.Second), 5*time.Millisecond)
	start = time.Now()
	require.NoError(t, srv.Client().HSet(ctx, key, "api", "limit=6").Err())
	waitLimit(t, 6, w)
	assert.Less(t, time.Since(start), within)
}

// TestWatcherRestartWithItsData restarts a Redis that keeps its data (AOF,
// fsync always): the overrides come back as they were, and a change after
// the restart is picked up.
func TestWatcherRestartWithItsData(t *testing.T) {
	srv := redistest.StartWith(t, "--appendonly", "yes", "--appendfsync", "always")
	key := newKey()
	a, logs := openOverrides(t, srv.Client(), key)
	b, _ := openOverrides(t, srv.Client(), key)
	ctx := context.Background()
	require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: 5}))
	waitLimit(t, 5, a, b)

	srv.Restart()
	v, err := srv.Client().HGet(ctx, key, "api").Result()
	require.NoError(t, err)
	assert.Equal(t, "limit=5", v, "Redis kept the hash")
	start := time.Now()
	require.NoError(t, srv.Client().HSet(ctx, key, "api", "limit=8").Err())
	took := waitLimit(t, 8, a, b)
	t.Logf("after the restart, a change in force on both after %v", took)
	assert.Less(t, took, within)
	assert.NotContains(t, logs.String(), "lost the overrides")
	assert.Less(t, time.Since(start), within)
}

// TestWatcherRestartEmpty restarts a Redis without its data: the servers
// keep the overrides, the first to notice writes them back, and changes
// afterwards are followed.
func TestWatcherRestartEmpty(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	a, logsA := openOverrides(t, srv.Client(), key)
	b, logsB := openOverrides(t, srv.Client(), key)
	ctx := context.Background()
	require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: 5}))
	require.NoError(t, a.Put(ctx, "search", overrides.Override{Scale: 0.5}))
	waitLimit(t, 5, a, b)

	srv.Restart() // empty
	raw := srv.Client()
	start := time.Now()
	require.Eventually(t, func() bool {
		m, err := raw.HGetAll(ctx, key).Result()
		return err == nil && m["api"] == "limit=5" && m["search"] == "scale=0.5"
	}, 5*within, 5*time.Millisecond, "written back")
	t.Logf("written back %v after the restart", time.Since(start))
	ok, err := raw.Exists(ctx, a.Marker()).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), ok, "the marker is back")
	for _, w := range []*rediswatch.Overrides{a, b} {
		assert.Equal(t, map[string]overrides.Override{"api": {Limit: 5}, "search": {Scale: 0.5}}, w.Snapshot())
	}
	// The writer logs after its script returns, so the hash can be seen
	// before the line: wait for the line, then let both watchers read
	// twice more, and count.
	restored := func() int {
		return strings.Count(logsA.String(), "lost the overrides") + strings.Count(logsB.String(), "lost the overrides")
	}
	require.Eventually(t, func() bool { return restored() >= 1 }, within, 2*time.Millisecond, "a server logged its write-back")
	waitReads(t, a, 2)
	waitReads(t, b, 2)
	assert.Equal(t, 1, restored(), "one server wrote them back")

	start = time.Now()
	require.NoError(t, raw.HSet(ctx, key, "api", "limit=9").Err())
	assert.Less(t, waitLimit(t, 9, a, b), within, "a change after the restart propagates")
	t.Logf("a change after the restart in force on both after %v", time.Since(start))
	require.NoError(t, raw.HDel(ctx, key, "api").Err())
	assert.Less(t, waitLimit(t, 100, a, b), within)
	assert.Equal(t, map[string]overrides.Override{"search": {Scale: 0.5}}, b.Snapshot())

	// DEL of the hash (the marker stays): an operator cleared every
	// override, and nothing is written back.
	require.NoError(t, raw.Del(ctx, key).Err())
	require.Eventually(t, func() bool { return len(a.Snapshot()) == 0 && len(b.Snapshot()) == 0 }, within, 2*time.Millisecond)
	waitReads(t, a, 2)
	n, err := raw.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a cleared hash stays cleared")
}

// TestWatcherPutJustAfterARestart writes into a Redis restarted empty
// before any watcher noticed: Put writes the lost overrides back first,
// so they are not taken as cleared.
func TestWatcherPutJustAfterARestart(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	a, _ := openOverrides(t, srv.Client(), key, rediswatch.WithPollInterval(time.Second))
	ctx := context.Background()
	require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: 5}))
	srv.Restart()
	require.NoError(t, a.Put(ctx, "search", overrides.Override{Limit: 7}))
	m, err := srv.Client().HGetAll(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"api": "limit=5", "search": "limit=7"}, m)
	assert.Equal(t, map[string]overrides.Override{"api": {Limit: 5}, "search": {Limit: 7}}, a.Snapshot())

	srv.Restart()
	require.NoError(t, a.Delete(ctx, "api"))
	m, err = srv.Client().HGetAll(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"search": "limit=7"}, m)
}

// netOut returns the bytes Redis has sent to its clients.
func netOut(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no total_net_output_bytes in INFO stats")
	return 0
}

func TestWatcherHostileHash(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	raw := srv.Client()
	ctx := context.Background()
	w, logs := openOverrides(t, srv.Client(), key, rediswatch.WithPollInterval(time.Second))
	require.NoError(t, w.Put(ctx, "api", overrides.Override{Limit: 5}))

	// A 1 MiB value and a 1 MiB name: malformed, and not sent.
	giant := strings.Repeat("9", 1<<20)
	require.NoError(t, raw.HSet(ctx, key, "api", "limit="+giant, strings.Repeat("n", 1<<20), "limit=1").Err())
	before := netOut(t, raw)
	require.NoError(t, w.Sync(ctx))
	sent := netOut(t, raw) - before
	t.Logf("Redis sent %d bytes for a sync of a hash holding 2 MiB", sent)
	assert.Less(t, sent, int64(16<<10), "the giant value and name did not cross the network")
	assert.Equal(t, map[string]overrides.Override{"api": {Limit: 5}}, w.Snapshot())
	assert.Contains(t, logs.String(), "a value of 1048582 bytes")
	assert.Less(t, len(logs.String()), 4096, "a giant field is clipped in the log")

	// 10,000 fields load; 10,001 are refused as a whole, the last good
	// overrides kept, and nothing sent.
	require.NoError(t, raw.Del(ctx, key).Err())
	pipe := raw.Pipeline()
	for i := range 10_000 {
		pipe.HSet(ctx, key, fmt.Sprintf("layer%d", i), "limit="+strconv.Itoa(i+1))
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, w.Sync(ctx))
	t.Logf("a sync of a hash of 10,000 fields took %v", time.Since(start))
	require.Len(t, w.Snapshot(), 10_000)
	fastest := time.Hour
	for range 3 {
		start = time.Now()
		require.NoError(t, w.Sync(ctx))
		fastest = min(fastest, time.Since(start))
	}
	// (The first may see a new DUMP while Redis still rehashes the hash.)
	t.Logf("a sync of the same 10,000 fields, unchanged, took %v", fastest)

	require.NoError(t, raw.HSet(ctx, key, "layer10000", "limit=1").Err())
	before = netOut(t, raw)
	assert.ErrorIs(t, w.Sync(ctx), rediswatch.ErrTooManyFields)
	assert.Less(t, netOut(t, raw)-before, int64(4<<10), "a refused hash sends no field")
	snap := w.Snapshot()
	assert.Len(t, snap, 10_000, "the last good overrides kept")
	assert.Equal(t, overrides.Override{Limit: 42}, snap["layer41"])
	assert.ErrorIs(t, w.Sync(ctx), rediswatch.ErrTooManyFields)
	assert.Equal(t, 1, strings.Count(logs.String(), "too many fields"), "logged once while it lasts")

	// Back to a sane hash: it loads.
	require.NoError(t, raw.Del(ctx, key).Err())
	require.NoError(t, raw.HSet(ctx, key, "api", "limit=9").Err())
	require.NoError(t, w.Sync(ctx))
	assert.Equal(t, map[string]overrides.Override{"api": {Limit: 9}}, w.Snapshot())
	assert.Contains(t, logs.String(), "within its bound again")
}

// TestWatcherCloseStopsPolling closes one of two watchers: while the other
// polls three times, the closed one reads nothing.
func TestWatcherCloseStopsPolling(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	a, _ := openOverrides(t, srv.Client(), key, rediswatch.WithPollInterval(10*time.Millisecond))
	b, _ := openOverrides(t, srv.Client(), key, rediswatch.WithPollInterval(10*time.Millisecond))
	ctx := context.Background()
	require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: 5}))
	waitReads(t, a, 2)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close twice")
	reads := a.Reads()
	waitReads(t, b, 3)
	assert.Equal(t, reads, a.Reads(), "no poll after Close")
	assert.ErrorIs(t, a.Sync(ctx), rediswatch.ErrClosed)
	assert.ErrorIs(t, a.Put(ctx, "api", overrides.Override{Limit: 1}), rediswatch.ErrClosed)
	assert.ErrorIs(t, a.Delete(ctx, "api"), rediswatch.ErrClosed)
	assert.Equal(t, int64(5), limitOf(a), "the overrides in force stay")
}

func TestWatcherOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	key := newKey()
	a, _ := openOverrides(t, cl.Client(), key)
	b, _ := openOverrides(t, cl.Client(), key)
	ctx := context.Background()
	require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: 4}))
	assert.Less(t, waitLimit(t, 4, a, b), within)
	require.NoError(t, b.Delete(ctx, "api"))
	assert.Less(t, waitLimit(t, 100, a, b), within)
}

func TestWatcherMarkerKey(t *testing.T) {
	assert.Equal(t, "{rl:overrides}:alive", rediswatch.MarkerOf("rl:overrides"))
	assert.Equal(t, "{rl}:overrides:alive", rediswatch.MarkerOf("{rl}:overrides"))
}

func TestWatcherNewRefusesBadInput(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	_, err := rediswatch.NewOverrides(ctx, nil)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	var nilClient *redis.Client
	_, err = rediswatch.NewOverrides(ctx, nilClient)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	for i, opt := range []rediswatch.Option{
		nil, rediswatch.WithKey(""), rediswatch.WithKey("a\nb"), rediswatch.WithKey("a}b"),
		rediswatch.WithKey("a{}b"), rediswatch.WithKey(strings.Repeat("k", 257)),
		rediswatch.WithPollInterval(time.Millisecond), rediswatch.WithPollInterval(1001 * time.Millisecond),
		rediswatch.WithMax(0), rediswatch.WithMax(100_001), rediswatch.WithLogger(nil),
	} {
		_, err = rediswatch.NewOverrides(ctx, srv.Client(), opt)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "option %d", i)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	_, err = rediswatch.NewOverrides(ctx, down)
	assert.Error(t, err, "Redis unreachable at start")
	frozen := redistest.Start(t)
	frozen.Freeze()
	defer frozen.Thaw()
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: frozen.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	start := time.Now()
	_, err = rediswatch.NewOverrides(tctx, c)
	assert.Error(t, err, "Redis not answering within ctx")
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestWatcherAdjustAllocatesNothing(t *testing.T) {
	srv := redistest.Start(t)
	w, _ := openOverrides(t, srv.Client(), newKey())
	require.NoError(t, w.Put(context.Background(), "api", overrides.Override{Scale: 0.5}))
	var p core.Policy
	var err error
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() { p, err = w.Adjust(ctx, "c", api) })
	assert.Zero(t, allocs)
	require.NoError(t, err)
	assert.Equal(t, int64(50), p.Limit)
}

func BenchmarkWatcherAdjust(b *testing.B) {
	srv := redistest.Start(b)
	w, _ := openOverrides(b, srv.Client(), newKey())
	require.NoError(b, w.Put(context.Background(), "api", overrides.Override{Scale: 0.5}))
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = w.Adjust(ctx, "c", api)
		}
	})
}

// BenchmarkWatcherSync measures one read of an unchanged hash of 100
// fields: what each poll costs.
func BenchmarkWatcherSync(b *testing.B) {
	srv := redistest.Start(b)
	key := newKey()
	raw := srv.Client()
	for i := range 100 {
		require.NoError(b, raw.HSet(context.Background(), key, fmt.Sprintf("layer%d", i), "limit=5").Err())
	}
	w, _ := openOverrides(b, raw, key, rediswatch.WithPollInterval(time.Second))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWatcherPropagationTimes makes ten changes on one server and
// measures when each is in force on the other: all within a second,
// about one poll interval on average.
func TestWatcherPropagationTimes(t *testing.T) {
	srv := redistest.Start(t)
	key := newKey()
	a, _ := openOverrides(t, srv.Client(), key)
	b, _ := openOverrides(t, srv.Client(), key)
	ctx := context.Background()
	var total, worst time.Duration
	const changes = 10
	for i := range changes {
		start := time.Now()
		require.NoError(t, a.Put(ctx, "api", overrides.Override{Limit: int64(10 + i)}))
		waitLimit(t, int64(10+i), b)
		took := time.Since(start)
		total += took
		worst = max(worst, took)
	}
	t.Logf("%d changes: in force on the other server after %v on average, %v at worst (poll interval %v)",
		changes, total/changes, worst, rediswatch.DefaultOverridesPollInterval)
	assert.Less(t, worst, within)
}
