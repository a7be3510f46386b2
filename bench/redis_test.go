package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	uredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
)

// redisAllow is one library's decision for key over Redis.
type redisAllow func(ctx context.Context, key string) (bool, error)

// redisContender builds one library's limiter over client: limit requests
// per window, by its own algorithm. algo names the algorithm for the key
// memory table ("" for the library's only one).
type redisContender struct {
	name  string
	build func(tb testing.TB, client *redis.Client, algo string, limit int64, window time.Duration) redisAllow
	// floodOnly marks a contender shown only in the denied cases.
	floodOnly bool
}

// ourAlgorithms maps the key memory table's row names to our algorithms.
var ourAlgorithms = map[string]core.Algorithm{
	"fixed-window":           core.FixedWindow,
	"sliding-window-log":     core.SlidingWindowLog,
	"sliding-window-counter": core.SlidingWindowCounter,
	"token-bucket":           core.TokenBucket,
	"leaky-bucket":           core.LeakyBucket,
}

// ours builds core.Limiter over redisstore with default options, token
// bucket unless algo says otherwise; opts are the Limiter's options.
func ours(opts ...core.Option) func(tb testing.TB, client *redis.Client, algo string, limit int64, window time.Duration) redisAllow {
	return func(tb testing.TB, client *redis.Client, algo string, limit int64, window time.Duration) redisAllow {
		st, err := redisstore.New(client)
		require.NoError(tb, err)
		tb.Cleanup(func() { _ = st.Close() })
		a := core.TokenBucket
		if algo != "" {
			a = ourAlgorithms[algo]
		}
		l, err := core.NewLimiter(st, []core.Policy{{Name: "bench", Algorithm: a, Limit: limit, Window: window}}, opts...)
		require.NoError(tb, err)
		return func(ctx context.Context, key string) (bool, error) {
			d, err := l.AllowN(ctx, key, 1, time.Time{})
			return d.Allowed, err
		}
	}
}

var redisContenders = []redisContender{
	{name: "ours", build: ours()},
	{name: "ours-denycache", build: ours(core.WithDenyCache(10_000)), floodOnly: true},
	{name: "redis_rate", build: func(tb testing.TB, client *redis.Client, _ string, limit int64, window time.Duration) redisAllow {
		l := redis_rate.NewLimiter(client)
		lim := redis_rate.Limit{Rate: int(limit), Burst: int(limit), Period: window}
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, lim)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	}},
	{name: "ulule", build: func(tb testing.TB, client *redis.Client, _ string, limit int64, window time.Duration) redisAllow {
		st, err := uredis.NewStoreWithOptions(client, limiter.StoreOptions{Prefix: "ulule"})
		require.NoError(tb, err)
		l := limiter.New(st, limiter.Rate{Period: window, Limit: limit})
		return func(ctx context.Context, key string) (bool, error) {
			c, err := l.Get(ctx, key)
			return !c.Reached, err
		}
	}},
	{name: "throttled", build: func(tb testing.TB, client *redis.Client, _ string, limit int64, window time.Duration) redisAllow {
		st, err := goredisstore.NewCtx(client, "throttled:")
		require.NoError(tb, err)
		// throttled admits MaxBurst+1 at once.
		l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(int(limit), window), MaxBurst: int(limit) - 1})
		require.NoError(tb, err)
		return func(ctx context.Context, key string) (bool, error) {
			limited, _, err := l.RateLimitCtx(ctx, key, 1)
			return !limited, err
		}
	}},
}

// redisCase is one row of the Redis table.
type redisCase struct {
	name       string
	keys       int // distinct keys, cycled
	goroutines int
	flood      bool // 10 a minute, exhausted before the clock starts
}

var redisCases = []redisCase{
	{"hot-key-1g", 1, 1, false},
	{"10k-keys-1g", 10_000, 1, false},
	{"hot-key-64g", 1, 64, false},
	{"10k-keys-64g", 10_000, 64, false},
	{"denied-1g", 1, 1, true},
	{"denied-64g", 1, 64, true},
}

// BenchmarkRedis measures each library's decisions against the same
// redis-server over the same go-redis client (redis.NewClient with default
// options), from one or 64 goroutines, on one key or 10,000 (each given
// one decision before the clock starts). Besides
// ns/op, allocs/op and decisions/s it reports the client process's CPU per
// decision, and the server's: used_cpu_user+used_cpu_sys per decision
// (redis-cpu-us/decision), and from INFO commandstats the usec of Lua
// scripts per decision (script-us/decision) and their number
// (scripts/decision).
func BenchmarkRedis(b *testing.B) {
	srv := redisServer(b)
	client := srv.NewClient()
	defer client.Close()
	ctx := context.Background()
	for _, rc := range redisCases {
		for _, c := range redisContenders {
			if c.floodOnly && !rc.flood {
				continue
			}
			b.Run(rc.name+"/"+c.name, func(b *testing.B) {
				flush(b, srv.Owned, client)
				limit, want := int64(redisNeverLimit), true
				if rc.flood {
					limit, want = floodLimit, false
				}
				allow := c.build(b, client, "", limit, window)
				t := tag()
				keys := make([]string, rc.keys)
				for i := range keys {
					keys[i] = t + strconv.Itoa(i)
				}
				if rc.flood {
					exhaust(b, allow, keys[0])
				} else {
					warm(b, allow, keys)
				}
				run(b, rc.goroutines, 1, want, func(i int) (bool, error) {
					return allow(ctx, keys[i%len(keys)])
				}, &redisProbe{client: client})
			})
		}
	}
}

// BenchmarkRedisKeyMemory makes each decision on a new key (so ns/op is
// the cost of a client's first request) and reports MEMORY USAGE (SAMPLES
// 0) of the keys written, 100 an hour, averaged over up to 200 of them (bytes/key):
// what one client costs Redis under each algorithm, after one request, key
// name included. Each library names its keys its own way (ours:
// "rl:{<key>}:bench:<algorithm>"; redis_rate: "rate:<key>"; ulule:
// "ulule:<key>"; throttled: "throttled:<key>").
func BenchmarkRedisKeyMemory(b *testing.B) {
	srv := redisServer(b)
	client := srv.NewClient()
	defer client.Close()
	ctx := context.Background()
	type row struct{ algo, lib string }
	rows := []row{
		{"fixed-window", "ours"}, {"fixed-window", "ulule"},
		{"sliding-window-log", "ours"},
		{"sliding-window-counter", "ours"},
		{"token-bucket", "ours"}, {"token-bucket", "redis_rate"}, {"token-bucket", "throttled"},
		{"leaky-bucket", "ours"},
	}
	for _, r := range rows {
		var c redisContender
		for _, rc := range redisContenders {
			if rc.name == r.lib {
				c = rc
			}
		}
		b.Run(r.algo+"/"+r.lib, func(b *testing.B) {
			flush(b, srv.Owned, client)
			algo := ""
			if r.lib == "ours" {
				algo = r.algo
			}
			// 100 an hour: a key of one request lives for 36 s or more,
			// past its MEMORY USAGE however slow the machine.
			allow := c.build(b, client, algo, 100, time.Hour)
			t := tag()
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = t + strconv.Itoa(i)
			}
			run(b, 1, 1, true, func(i int) (bool, error) { return allow(ctx, keys[i]) })
			b.ReportMetric(keyMemory(b, client, t), "bytes/key")
		})
	}
}

// warm makes one decision on each key before the clock starts, so that
// the timed decisions find state in Redis, as a server's regular clients
// do (BenchmarkRedisKeyMemory measures new keys).
func warm(tb testing.TB, allow redisAllow, keys []string) {
	tb.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Int64
	const workers = 32
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				if ok, err := allow(ctx, keys[i]); err != nil || !ok {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// throttled may fail under contention; no other library should.
	require.LessOrEqual(tb, failed.Load(), int64(len(keys)/100), "warming the keys: too many errors or denials")
}

// exhaust spends key's quota (floodLimit) and checks that the next
// decision is a denial.
func exhaust(tb testing.TB, allow redisAllow, key string) {
	tb.Helper()
	ctx := context.Background()
	for range floodLimit {
		ok, err := allow(ctx, key)
		require.NoError(tb, err)
		require.True(tb, ok, "a request within the limit was denied")
	}
	ok, err := allow(ctx, key)
	require.NoError(tb, err)
	require.False(tb, ok, "the request past the limit was allowed")
}

// flush empties the server between cases when the benchmark owns it, so
// that every case starts with the same small keyspace; a server of
// REDIS_URL's is left alone (keys are tagged per run instead).
func flush(tb testing.TB, owned bool, client *redis.Client) {
	tb.Helper()
	if owned {
		require.NoError(tb, client.FlushAll(context.Background()).Err())
	}
}

// keyMemory returns the mean MEMORY USAGE of up to 200 keys whose name
// holds t. A key that expires between the scan and its MEMORY USAGE (a
// bucket of one request refills in well under a second) is left out.
func keyMemory(tb testing.TB, client *redis.Client, t string) float64 {
	tb.Helper()
	ctx := context.Background()
	var keys []string
	iter := client.Scan(ctx, 0, "*"+t+"*", 1000).Iterator()
	for iter.Next(ctx) && len(keys) < 200 {
		keys = append(keys, iter.Val())
	}
	require.NoError(tb, iter.Err())
	require.NotEmpty(tb, keys, "no key holds %q", t)
	var sum, measured int64
	for _, k := range keys {
		n, err := client.MemoryUsage(ctx, k, 0).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan
		}
		require.NoError(tb, err)
		sum += n
		measured++
	}
	require.Positive(tb, measured, "every key holding %q expired before MEMORY USAGE", t)
	return float64(sum) / float64(measured)
}

// redisProbe reads INFO commandstats and INFO cpu around the timed part.
type redisProbe struct {
	client *redis.Client
	before redisStats
}

func (p *redisProbe) start(tb testing.TB) {
	tb.Helper()
	p.before = readRedisStats(tb, p.client)
}

func (p *redisProbe) stop(b *testing.B, decisions int) {
	after := readRedisStats(b, p.client)
	n := float64(decisions)
	b.ReportMetric((after.cpuSeconds-p.before.cpuSeconds)*1e6/n, "redis-cpu-us/decision")
	b.ReportMetric(float64(after.scriptUsec-p.before.scriptUsec)/n, "script-us/decision")
	b.ReportMetric(float64(after.scriptCalls-p.before.scriptCalls)/n, "scripts/decision")
}

// redisStats is what the benchmarks read from INFO: the server's CPU time
// (used_cpu_user + used_cpu_sys), and the calls and usec of Lua scripts
// (EVAL and EVALSHA, whose usec include those of the commands they call,
// which commandstats also counts under their own names).
type redisStats struct {
	cpuSeconds              float64
	scriptCalls, scriptUsec int64
}

// readRedisStats reads INFO commandstats and cpu.
func readRedisStats(tb testing.TB, client *redis.Client) redisStats {
	tb.Helper()
	info, err := client.Info(context.Background(), "commandstats", "cpu").Result()
	require.NoError(tb, err)
	st, err := parseRedisStats(info)
	require.NoError(tb, err)
	return st
}

// parseRedisStats reads redisStats from the text of INFO.
func parseRedisStats(info string) (redisStats, error) {
	var st redisStats
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_user", "used_cpu_sys":
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return redisStats{}, fmt.Errorf("INFO %s: %w", name, err)
			}
			st.cpuSeconds += f
		case "cmdstat_eval", "cmdstat_evalsha":
			for field := range strings.SplitSeq(value, ",") {
				k, v, _ := strings.Cut(field, "=")
				if k != "calls" && k != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return redisStats{}, fmt.Errorf("INFO %s: %w", name, err)
				}
				if k == "calls" {
					st.scriptCalls += n
				} else {
					st.scriptUsec += n
				}
			}
		}
	}
	return st, nil
}

func TestParseRedisStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_get:calls=201,usec=228,usec_per_call=1.13,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=1,usec=214,usec_per_call=214.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=201,usec=5920,usec_per_call=29.45,rejected_calls=0,failed_calls=1\r\n" +
		"\r\n# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\nused_cpu_sys_children:9.000000\r\n"
	st, err := parseRedisStats(info)
	require.NoError(t, err)
	require.Equal(t, redisStats{cpuSeconds: 1.75, scriptCalls: 202, scriptUsec: 6134}, st)

	_, err = parseRedisStats("cmdstat_evalsha:calls=x,usec=1\r\n")
	require.ErrorContains(t, err, "cmdstat_evalsha")
}

// TestRedisContenders checks each library's limiter as the benchmarks
// build it: a fresh key is allowed under the never-reached policy, and the
// flood policy admits exactly floodLimit before it denies.
func TestRedisContenders(t *testing.T) {
	srv := redisServer(t)
	client := srv.NewClient()
	defer client.Close()
	for _, c := range redisContenders {
		t.Run(c.name, func(t *testing.T) {
			allow := c.build(t, client, "", redisNeverLimit, window)
			ok, err := allow(context.Background(), tag()+"fresh")
			require.NoError(t, err)
			require.True(t, ok)
			exhaust(t, c.build(t, client, "", floodLimit, window), tag()+"flood")
		})
	}
	for algo := range ourAlgorithms {
		t.Run("ours/"+algo, func(t *testing.T) {
			exhaust(t, ours()(t, client, algo, floodLimit, window), tag()+"flood")
		})
	}
}
