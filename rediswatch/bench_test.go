package rediswatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/rediswatch"
)

// quiet is the benchmarks' logger: the first New logs the marker it sets.
var quiet = rediswatch.WithLogger(slog.New(slog.DiscardHandler))

// benchHeld is how many bans the benchmarks hold: the 100,000,
// half ranges and half keys.
const benchHeld = 100_000

// benchEntry returns the i-th ban fill writes.
func benchEntry(i int) access.Entry {
	if i%2 == 0 {
		return access.Entry{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)}
	}
	return access.Entry{Key: fmt.Sprintf("user:%d", i)}
}

// fill writes n permanent bans straight into Redis under prefix, as Ban
// stores them, in pipelines of 5,000 commands.
func fill(tb testing.TB, raw *redis.Client, prefix string, n int) {
	tb.Helper()
	ctx := context.Background()
	tag := "{" + prefix + "}:"
	pipe := raw.Pipeline()
	for i := range n {
		e := benchEntry(i)
		id := "k:" + e.Key
		if e.Key == "" {
			id = "p:" + e.Prefix.String()
		}
		pipe.Set(ctx, tag+"b:"+id, "v1|0|bench", 0)
		pipe.ZAdd(ctx, tag+"i", redis.Z{Score: math.Inf(1), Member: id})
		if i%2500 == 2499 {
			_, err := pipe.Exec(ctx)
			require.NoError(tb, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(tb, err)
}

// benchSetup starts a Redis of the benchmark's own holding benchHeld bans
// and returns it with their prefix.
func benchSetup(b *testing.B) (*redistest.Server, string) {
	b.Helper()
	srv := redistest.StartWith(b)
	prefix := "bench"
	fill(b, srv.Client(), prefix, benchHeld)
	return srv, prefix
}

// benchOpen returns a Bans that polls rarely (the benchmark drives it),
// with room for more bans than it holds.
func benchOpen(b *testing.B, c redis.UniversalClient, prefix string) *rediswatch.Bans {
	b.Helper()
	bans, err := rediswatch.NewBans(context.Background(), c, rediswatch.WithKey(prefix), rediswatch.WithPollInterval(time.Minute),
		rediswatch.WithMax(1_000_000), quiet)
	require.NoError(b, err)
	b.Cleanup(func() { _ = bans.Close() })
	require.Equal(b, benchHeld, rediswatch.Len(bans))
	return bans
}

// benchClient is a client with timeouts fit for a full load of 100,000
// bans on a busy machine.
func benchClient(b *testing.B, srv *redistest.Server) *redis.Client {
	o := srv.Options()
	o.ReadTimeout = time.Minute
	o.WriteTimeout = time.Minute
	c := redis.NewClient(o)
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// cpuTime returns the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBan is one Ban on a server holding 100,000 bans, until it is
// in force there.
func BenchmarkBan(b *testing.B) {
	srv, prefix := benchSetup(b)
	bans := benchOpen(b, benchClient(b, srv), prefix)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, err := bans.Ban(ctx, access.Entry{Key: fmt.Sprintf("new:%d", i), Reason: "bench"}, 0)
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkUnban is one Unban on a server holding 100,000 bans, until it
// is lifted there.
func BenchmarkUnban(b *testing.B) {
	srv, prefix := benchSetup(b)
	bans := benchOpen(b, benchClient(b, srv), prefix)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := bans.Unban(ctx, benchEntry(i%benchHeld)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPropagation is what one Ban on a server costs another server
// that holds 100,000 bans: the catching up its poller does (Sync does
// the same). cpu-ns/op is the CPU time this process spends in it (Redis
// runs in its own process).
func BenchmarkPropagation(b *testing.B) {
	srv, prefix := benchSetup(b)
	c := benchClient(b, srv)
	one := benchOpen(b, c, prefix)
	two := benchOpen(b, c, prefix)
	ctx := context.Background()
	var cpu time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		key := fmt.Sprintf("new:%d", i)
		_, err := one.Ban(ctx, access.Entry{Key: key}, 0)
		if err != nil {
			b.Fatal(err)
		}
		i++
		start := cpuTime(b)
		b.StartTimer()
		if err := two.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime(b) - start
		if _, ok := two.Match(netip.Addr{}, key, time.Now()); !ok {
			b.Fatalf("ban %d not in force on the other server after Sync", i)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkStartup is New on a Redis holding 100,000 bans: it returns
// once they are in force.
func BenchmarkStartup(b *testing.B) {
	srv, prefix := benchSetup(b)
	c := benchClient(b, srv)
	defer longestCall(b, c)()
	b.ReportAllocs()
	for b.Loop() {
		bans, err := rediswatch.NewBans(context.Background(), c, rediswatch.WithKey(prefix), quiet)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if rediswatch.Len(bans) != benchHeld {
			b.Fatalf("%d bans loaded, not %d", rediswatch.Len(bans), benchHeld)
		}
		_ = bans.Close()
		b.StartTimer()
	}
}

// manyBatch returns the i-th batch of 1,000 new bans, an hour long.
func manyBatch(i int) []access.Entry {
	batch := make([]access.Entry, 1000)
	until := time.Now().Add(time.Hour)
	for j := range batch {
		n := i*1000 + j
		batch[j] = access.Entry{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(n >> 16), byte(n >> 8), byte(n)}), 32), Expires: until}
	}
	return batch
}

// BenchmarkBanMany is one BanMany of 1,000 new bans on a server holding
// 100,000, until they are in force there.
func BenchmarkBanMany(b *testing.B) {
	srv, prefix := benchSetup(b)
	bans := benchOpen(b, benchClient(b, srv), prefix)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		batch := manyBatch(i)
		i++
		b.StartTimer()
		if _, err := bans.BanMany(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/ban")
}

// BenchmarkPropagationMany is what one BanMany of 1,000 bans costs
// another server that holds 100,000; see BenchmarkPropagation.
func BenchmarkPropagationMany(b *testing.B) {
	srv, prefix := benchSetup(b)
	c := benchClient(b, srv)
	one := benchOpen(b, c, prefix)
	two := benchOpen(b, c, prefix)
	ctx := context.Background()
	var cpu time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		batch := manyBatch(i)
		i++
		if _, err := one.BanMany(ctx, batch); err != nil {
			b.Fatal(err)
		}
		start := cpuTime(b)
		b.StartTimer()
		if err := two.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime(b) - start
		if want := benchHeld + 1000*i; rediswatch.Len(two) != want {
			b.Fatalf("%d bans on the other server after Sync, not %d", rediswatch.Len(two), want)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// longestCall reports, as max-call-ms, the longest any one call of c
// kept Redis's main thread on a CPU from the moment it was sent until
// its reply came back (Linux: the thread's schedstat; a busy machine
// stretches the wall time of a call, not this), and as max-wall-ms its
// wall time: how long one call of a load or a write-back holds Redis.
// It reports when the returned function is called.
func longestCall(b *testing.B, c *redis.Client) func() {
	b.Helper()
	pid, err := c.InfoMap(context.Background(), "server").Result()
	require.NoError(b, err)
	stat := "/proc/" + pid["Server"]["process_id"] + "/schedstat"
	cpu := func() time.Duration {
		raw, err := os.ReadFile(stat)
		if err != nil {
			return 0 // not Linux, or a Redis elsewhere: max-call-ms is 0
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		return time.Duration(ns)
	}
	var mu sync.Mutex
	var longest, wall time.Duration
	c.AddHook(timingHook(func(d, w time.Duration) {
		mu.Lock()
		longest, wall = max(longest, d), max(wall, w)
		mu.Unlock()
	}, cpu))
	return func() {
		b.ReportMetric(float64(longest.Microseconds())/1000, "max-call-ms")
		b.ReportMetric(float64(wall.Microseconds())/1000, "max-wall-ms")
	}
}

// timingHook returns a go-redis hook that tells f each call's Redis CPU
// time, as cpu reads it, and its wall time.
func timingHook(f func(cpu, wall time.Duration), cpu func() time.Duration) redis.Hook {
	return hookFuncs{f: f, cpu: cpu}
}

type hookFuncs struct {
	f   func(cpu, wall time.Duration)
	cpu func() time.Duration
}

func (h hookFuncs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hookFuncs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c0, w0 := h.cpu(), time.Now()
		err := next(ctx, cmd)
		h.f(h.cpu()-c0, time.Since(w0))
		return err
	}
}

func (h hookFuncs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c0, w0 := h.cpu(), time.Now()
		err := next(ctx, cmds)
		h.f(h.cpu()-c0, time.Since(w0))
		return err
	}
}

// BenchmarkResync is the full reload of 100,000 bans that each server's
// poller does every resync interval (a minute), and after a loss: every
// call reads a page of them.
func BenchmarkResync(b *testing.B) {
	srv, prefix := benchSetup(b)
	c := benchClient(b, srv)
	bans := benchOpen(b, c, prefix)
	ctx := context.Background()
	defer longestCall(b, c)()
	b.ReportAllocs()
	for b.Loop() {
		if err := rediswatch.Reload(ctx, bans); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteBack is what a server holding 100,000 bans does first
// when it finds Redis flushed: it writes them back, in pages.
func BenchmarkWriteBack(b *testing.B) {
	benchFlushed(b, "the write-back", rediswatch.WriteBack, func(ctx context.Context, bans *rediswatch.Bans) error {
		return rediswatch.Reload(ctx, bans) // in the new epoch
	})
}

// BenchmarkRecovery is what a server holding 100,000 bans does when it
// finds Redis flushed: it writes them back and reloads them, in pages.
func BenchmarkRecovery(b *testing.B) {
	benchFlushed(b, "the recovery", func(ctx context.Context, bans *rediswatch.Bans) error { return bans.Sync(ctx) }, func(_ context.Context, bans *rediswatch.Bans) error {
		if n := rediswatch.Len(bans); n != benchHeld {
			return fmt.Errorf("%d bans held after the recovery", n)
		}
		return nil
	})
}

// benchFlushed times run on a server holding 100,000 bans, each time
// after Redis was flushed (untimed), and checks, untimed, that Redis
// holds them all again after it, then after.
func benchFlushed(b *testing.B, what string, run, after func(context.Context, *rediswatch.Bans) error) {
	srv, prefix := benchSetup(b)
	c := benchClient(b, srv)
	bans := benchOpen(b, c, prefix)
	ctx := context.Background()
	defer longestCall(b, c)()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if err := c.FlushDBAsync(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := run(ctx, bans); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if n, err := c.ZCard(ctx, "{"+prefix+"}:i").Result(); err != nil || n != benchHeld {
			b.Fatalf("%d bans in Redis (%v) after %s", n, err, what)
		}
		require.NoError(b, after(ctx, bans))
		b.StartTimer()
	}
}
