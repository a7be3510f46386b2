package redisstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
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
// decision (Store.Take, one EVALSHA) cost Redis, by INFO commandstats:
// evalsha's usec over its calls, read around blocks of 100 decisions that
// alternate between admitted and denied ones, so that both meet the same
// load on a shared machine. It reports the median block of each
// (admitted-µs/script, denied-µs/script) and their ratio
// (denied/admitted); the same for go-redis/redis_rate's GCRA script
// (redis_rate), the reference of issue 12. Each sub-benchmark has a
// redis-server of its own; ns/op is a round trip, half of them admitted.
//
//   - admitted: one hot key, requests at explicit times 20µs apart under
//     100 000 per second (the log holds up to 50 000 members).
//   - denied: another key, exhausted by a request of the whole capacity,
//     then requests of cost 1 a microsecond later; for
//     sliding_window_counter/whole-limit, at limits.MaxLimit per hour, 27
//     units, then requests of the whole limit.
//
// redis_rate's requests are at Redis TIME: 1e9 per second (burst 1e9) for
// admitted; one per hour (burst 10) on a key used up by its first ten for
// denied.
func BenchmarkDenial(b *testing.B) {
	const block = 100
	ctx := context.Background()
	run := func(b *testing.B, c redis.UniversalClient, admit func(i int) bool, deny func() bool) {
		b.Helper()
		var blocks [2][]float64 // µs/script of the admitted blocks, then of the denied
		calls, usec := scriptCalls(b, c)
		b.ReportAllocs()
		i, admitted := 0, 0
		for b.Loop() {
			denied := (i/block)%2 == 1
			if denied {
				if deny() {
					b.Fatalf("decision %d: admitted, want denied", i)
				}
			} else {
				if !admit(admitted) {
					b.Fatalf("decision %d: denied, want admitted", i)
				}
				admitted++
			}
			i++
			if i%block == 0 {
				calls2, usec2 := scriptCalls(b, c)
				k := 0
				if denied {
					k = 1
				}
				blocks[k] = append(blocks[k], float64(usec2-usec)/float64(calls2-calls))
				calls, usec = calls2, usec2
			}
		}
		if len(blocks[1]) == 0 {
			return // too short a run to measure: b.Loop's first rounds
		}
		a, d := median(blocks[0]), median(blocks[1])
		b.ReportMetric(a, "admitted-µs/script")
		b.ReportMetric(d, "denied-µs/script")
		b.ReportMetric(d/a, "denied/admitted")
	}
	reqs, out := make([]core.Request, 1), make([]core.Decision, 1)
	take := func(b *testing.B, s *Store, now time.Time, req core.Request) bool {
		reqs[0] = req
		if _, err := s.Take(ctx, now, reqs, out); err != nil {
			b.Fatal(err)
		}
		return out[0].Allowed
	}
	type denialCase struct {
		name        string
		p           core.Policy
		first, deny int64 // the cost that exhausts the key, and the denied one
	}
	var cases []denialCase
	for _, a := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Name: "bench", Algorithm: a, Limit: limits.MaxLogLimit, Window: time.Second}
		cases = append(cases, denialCase{string(a), p, limits.Capacity(p.Algorithm, p.Limit, p.Burst), 1})
	}
	// Where float64 steps are coarse: a request of the whole limit, behind
	// 27 units, waits for their weight to round away in L + weight. The
	// real-number estimate (the window's end) took ~50 admission tests.
	cases = append(cases, denialCase{"sliding_window_counter/whole-limit",
		core.Policy{Name: "bench", Algorithm: core.SlidingWindowCounter, Limit: limits.MaxLimit, Window: time.Hour},
		27, limits.MaxLimit})
	for _, dc := range cases {
		p := dc.p
		b.Run(dc.name, func(b *testing.B) {
			s, _, c := newStore(b)
			if !take(b, s, t0, core.Request{Key: "full", Policy: p, Cost: dc.first}) {
				b.Fatal("the first request is denied")
			}
			at := t0.Add(time.Microsecond)
			run(b, c, func(i int) bool {
				return take(b, s, t0.Add(time.Duration(i)*20*time.Microsecond), core.Request{Key: "hot", Policy: p, Cost: 1})
			}, func() bool {
				return take(b, s, at, core.Request{Key: "full", Policy: p, Cost: dc.deny})
			})
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
	b.Run("redis_rate", func(b *testing.B) {
		c := redistest.Start(b).Client()
		for range 10 {
			rate(b, c, "rate:full", 1, 3600, 10)
		}
		run(b, c, func(int) bool { return rate(b, c, "rate:hot", 1e9, 1, 1e9) },
			func() bool { return rate(b, c, "rate:full", 1, 3600, 10) })
	})
}

// median returns the median of v, which it sorts.
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
