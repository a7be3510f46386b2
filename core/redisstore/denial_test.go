package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// countingScript returns the script of the algorithm algos[i] with
// first_pass counting the admission tests it makes, and redis.call and
// redis.pcall the commands: its reply is the algorithm's, then the two
// counts. A local redis, ahead of the prelude, shadows the global for the
// whole script; the algorithm runs as the body of a function, as under
// lockout.lua, after a first_pass of the same name that shadows the
// prelude's.
func countingScript(i int) *redis.Script {
	return redis.NewScript(`
local commands = 0
local real_redis = redis
local redis = setmetatable({
  call = function(...) commands = commands + 1; return real_redis.call(...) end,
  pcall = function(...) commands = commands + 1; return real_redis.pcall(...) end,
}, {__index = real_redis})
` + preludeLua + `
local admission_tests = 0
local counted_first_pass = first_pass
local function first_pass(lo, hi, estimate, passes)
  return counted_first_pass(lo, hi, estimate, function(k)
    admission_tests = admission_tests + 1
    return passes(k)
  end)
end
local function decide()
` + *algos[i].lua + `
end
local reply = decide()
reply[6] = admission_tests
reply[7] = commands
return reply
`)
}

// logUniform returns an integer in [lo, hi], log-uniformly, so that small
// and extreme values are both drawn often.
func logUniform(r *rand.Rand, lo, hi int64) int64 {
	v := int64(math.Exp(math.Log(float64(lo)) + r.Float64()*(math.Log(float64(hi))-math.Log(float64(lo)))))
	return min(max(v, lo), hi)
}

// randomPolicy returns a valid policy of the algorithm a from the whole
// range Validate allows: limits up to limits.MaxLimit, windows from
// limits.MinWindow to limits.MaxWindow, bursts up to what refills within
// limits.MaxWindow.
func randomPolicy(r *rand.Rand, a core.Algorithm) core.Policy {
	for {
		p := core.Policy{Name: "p", Algorithm: a,
			Limit:  logUniform(r, 1, limits.MaxLimit),
			Window: time.Duration(logUniform(r, limits.MinWindow.Microseconds(), limits.MaxWindow.Microseconds())) * time.Microsecond,
		}
		switch r.IntN(4) {
		case 0:
			p.Limit = limits.MaxLimit
		case 1:
			p.Window = limits.MaxWindow
		}
		if limits.IsBucket(a) && r.IntN(2) == 0 {
			p.Burst = logUniform(r, 1, limits.MaxLimit)
		}
		if p.Validate() == nil {
			return p
		}
	}
}

// TestDenialSearchIsShort runs the scripts of the three algorithms that
// search for RetryAfter (token bucket, leaky bucket, sliding window
// counter) over random histories of random and extreme policies, in a
// real redis-server, with first_pass counting its admission tests; memstore
// decides the same requests. Every Decision must be memstore's (so every
// RetryAfter exact, as core/memstore's TestDenialSearchIsShort checks
// there), every denial make at most 4 admission tests and one command (the
// state's read; an admission also writes): a denial costs Redis no more
// than an admission, at any policy. Count based; nothing here is timed.
func TestDenialSearchIsShort(t *testing.T) {
	const maxTests = 4
	// The state's read and write: GET and SET.
	const admittedCommands = 2
	_, _, c := newStore(t)
	ms := newMemStore(t)
	ctx := context.Background()
	prefix := testPrefix(t)
	// Far in the future, so that memstore's janitor, which reads the
	// real clock, reclaims nothing the history needs; below 2^53 µs.
	base := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	r := rand.New(rand.NewPCG(12, 4))
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.SlidingWindowCounter} {
		i := algo(a)
		script := countingScript(i)
		denials, total, worst := 0, 0, 0
		for n := range 150 {
			p := randomPolicy(r, a)
			p.Name = fmt.Sprintf("p%d", n)
			w, b := p.Window.Microseconds(), limits.Capacity(p.Algorithm, p.Limit, p.Burst)
			key := prefix + p.Name + ":" + algos[i].code
			now := base + r.Int64N(w)
			for step := range 20 {
				switch r.IntN(4) {
				case 0:
				case 1:
					now += r.Int64N(4)
				case 2:
					now += r.Int64N(max(w/p.Limit, 1) + 1)
				default:
					now += r.Int64N(w + 1)
				}
				cost := logUniform(r, 1, b)
				if r.IntN(4) == 0 {
					cost = b
				}
				req := core.Request{Key: p.Name, Policy: p, Cost: cost}
				want, _, err := take1(ms, ctx, time.UnixMicro(now), req)
				require.NoError(t, err)
				reply, err := script.Run(ctx, c, []string{key}, p.Limit, w, b, cost, now, 60_000).Int64Slice()
				require.NoError(t, err, "%+v: step %d", p, step)
				require.Len(t, reply, 7)
				got := core.Decision{
					Allowed: reply[0] == 1, Limit: b, Remaining: reply[1],
					ResetAfter: time.Duration(reply[2]) * time.Millisecond,
					RetryAfter: time.Duration(reply[3]) * time.Millisecond,
					Delay:      time.Duration(reply[4]) * time.Millisecond,
				}
				require.Equal(t, want, got, "%+v: step %d, cost %d at %d: the script against memstore", p, step, cost, now)
				if got.Allowed {
					require.Zero(t, reply[5], "%+v: step %d: an admission searches nothing", p, step)
					require.EqualValues(t, admittedCommands, reply[6], "%+v: step %d: commands of an admission", p, step)
					continue
				}
				// A denial reads the state, and that is all.
				require.EqualValues(t, 1, reply[6], "%+v: step %d: commands of a denial", p, step)
				denials++
				total += int(reply[5])
				worst = max(worst, int(reply[5]))
				require.LessOrEqual(t, reply[5], int64(maxTests), "%+v: step %d, cost %d at %d: admission tests of one denial", p, step, cost, now)
			}
		}
		require.Greater(t, denials, 200, "%s: denials checked", a)
		t.Logf("%s: %d denials, %.2f admission tests each on average, %d at most", a, denials, float64(total)/float64(denials), worst)
	}
}
