package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/redistest"
)

// redisRateAllowN is the script of github.com/go-redis/redis_rate/v10
// (v10.0.1, lua.go, allowN; BSD-2-Clause, after Pavel Pravosud's
// redis-gcra), verbatim but for its comments: the reference that issue 12
// compares a denial's cost and a key's memory with. It stores one string
// per key, the GCRA's TAT in seconds since 2017, with SET ... EX.
const redisRateAllowN = `
redis.replicate_commands()

local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)

local tat = redis.call("GET", rate_limit_key)

if not tat then
  tat = now
else
  tat = tonumber(tat)
end

tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset

local diff = now - allow_at
local remaining = diff / emission_interval

if remaining < 0 then
  local reset_after = tat - now
  local retry_after = diff * -1
  return {
    0, -- allowed
    0, -- remaining
    tostring(retry_after),
    tostring(reset_after),
  }
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
local retry_after = -1
return {cost, remaining, tostring(retry_after), tostring(reset_after)}
`

// scriptCalls returns the calls of EVALSHA so far and the microseconds Redis
// spent in them, by INFO commandstats.
func scriptCalls(tb testing.TB, c redis.UniversalClient) (calls, usec int64) {
	tb.Helper()
	stats, err := commandStats(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	return stats["evalsha"].calls, stats["evalsha"].usec
}

// BenchmarkDenial measures, per algorithm, what an admitted and a denied
// decision (Store.Take, one EVALSHA) cost Redis, by INFO commandstats
// (evalsha's usec over its calls during the run), reported as µs/script
// beside the round trip; and the same for go-redis/redis_rate's GCRA
// script (redis_rate/...), the reference of issue 12. Each sub-benchmark
// has a redis-server of its own.
//
//   - admitted: one hot key, requests at explicit times 20µs apart under
//     100 000 per second (the log holds 50 000 members), all admitted.
//   - denied: one key exhausted by a request of the whole capacity, then
//     requests of cost 1 a microsecond later, all denied.
//
// redis_rate's requests are at Redis TIME: one per hour (burst 10) on a
// key used up by its first ten, so that every later request is denied;
// and 1e9 per second (burst 1e9) for admitted.
func BenchmarkDenial(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, c redis.UniversalClient, decide func(i int) bool, allowed bool) {
		b.Helper()
		calls, usec := scriptCalls(b, c)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if got := decide(i); got != allowed {
				b.Fatalf("decision %d: Allowed %v, want %v", i, got, allowed)
			}
			i++
		}
		calls2, usec2 := scriptCalls(b, c)
		if n := calls2 - calls; n > 0 {
			b.ReportMetric(float64(usec2-usec)/float64(n), "µs/script")
		}
	}
	for _, a := range core.Algorithms() {
		p := core.Policy{Name: "bench", Algorithm: a, Limit: core.MaxLogLimit, Window: time.Second}
		take := func(b *testing.B, s *Store, req core.Request) bool {
			d, err := s.Take(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			return d.Allowed
		}
		b.Run(string(a)+"/admitted", func(b *testing.B) {
			s, _, c := newStore(b)
			run(b, c, func(i int) bool {
				return take(b, s, core.Request{Key: "hot", Policy: p, Cost: 1, Now: t0.Add(time.Duration(i) * 20 * time.Microsecond)})
			}, true)
		})
		b.Run(string(a)+"/denied", func(b *testing.B) {
			s, _, c := newStore(b)
			if !take(b, s, core.Request{Key: "full", Policy: p, Cost: p.Capacity(), Now: t0}) {
				b.Fatal("the first request of the whole capacity is denied")
			}
			at := t0.Add(time.Microsecond)
			run(b, c, func(int) bool {
				return take(b, s, core.Request{Key: "full", Policy: p, Cost: 1, Now: at})
			}, false)
		})
	}
	rr := redis.NewScript(redisRateAllowN)
	rate := func(b *testing.B, c redis.UniversalClient, key string, rate, period, burst int64) bool {
		r, err := rr.Run(ctx, c, []string{key}, burst, rate, period, 1).Slice()
		if err != nil {
			b.Fatal(err)
		}
		return r[0].(int64) > 0
	}
	b.Run("redis_rate/admitted", func(b *testing.B) {
		c := redistest.Start(b).Client()
		run(b, c, func(int) bool { return rate(b, c, "rate:hot", 1e9, 1, 1e9) }, true)
	})
	b.Run("redis_rate/denied", func(b *testing.B) {
		c := redistest.Start(b).Client()
		for range 10 {
			rate(b, c, "rate:full", 1, 3600, 10)
		}
		run(b, c, func(int) bool { return rate(b, c, "rate:full", 1, 3600, 10) }, false)
	})
}
