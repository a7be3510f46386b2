package redisstore

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

var (
	diffSteps = flag.Int("diffsteps", 300, "steps per policy of TestMatchesMemstore")
	diffSeed  = flag.Uint64("diffseed", 0, "seed of TestMatchesMemstore")
)

// TestMatchesMemstore drives the same randomized history (seeded; random
// keys, costs, time steps, clocks stepping back and resets, all at explicit
// times) into memstore, the reference arithmetic, and into Redis, half of
// it through the layered script (TakeAll of one request), and requires
// identical Decisions at every step.
func TestMatchesMemstore(t *testing.T) {
	rs, _, _ := newStore(t)
	ms := newMemStore(t)
	ctx := context.Background()

	// Far in the future, so that memstore's janitor (which reads the real
	// clock) never reclaims state the history still needs.
	base := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := *diffSteps
	for ai, alg := range limits.Algorithms[core.Algorithm]() {
		for si, sh := range diffShapes {
			p := core.Policy{Name: fmt.Sprintf("diff%d", si), Algorithm: alg, Limit: sh.limit, Window: sh.window}
			if limits.IsBucket(alg) {
				p.Burst = sh.burst
			}
			if p.Validate() != nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", alg, si), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(*diffSeed+uint64(ai), uint64(si)))
				w := p.Window.Microseconds()
				step := max(w/p.Limit, 1) // time for one unit to come back
				// Lua numbers are float64: keep times below 2^53 µs (year
				// 2255) however long the history and the window.
				span := min(w, (24 * time.Hour).Microseconds())
				now := base.UnixMicro() + rng.Int64N(w)
				keys := []string{"a", "b", "c"}
				var history []string
				for i := range steps {
					var at int64
					now, at = diffAdvance(rng, now, step, span)
					key := keys[rng.IntN(len(keys))]
					if rng.IntN(50) == 0 {
						history = append(history, fmt.Sprintf("%d %s reset", i, key))
						require.NoError(t, rs.Reset(ctx, key, p), "step %d: redis Reset", i)
						require.NoError(t, ms.Reset(ctx, key, p), "step %d: memory Reset", i)
						continue
					}
					cost := int64(1)
					switch r := rng.IntN(100); {
					case r < 10: // anything up to the capacity
						cost = 1 + rng.Int64N(limits.Capacity(p.Algorithm, p.Limit, p.Burst))
					case r < 15: // the capacity, or just under it
						cost = limits.Capacity(p.Algorithm, p.Limit, p.Burst) - rng.Int64N(min(limits.Capacity(p.Algorithm, p.Limit, p.Burst), 4))
					case r < 35:
						cost = 1 + rng.Int64N(min(limits.Capacity(p.Algorithm, p.Limit, p.Burst), 50))
					}
					req := core.Request{Key: key, Policy: p, Cost: cost}
					history = append(history, fmt.Sprintf("%d %s c=%d at=%d", i, key, cost, at))
					want, _, err := take1(ms, ctx, time.UnixMicro(at), req)
					require.NoError(t, err, "step %d: memory", i)
					// Half the steps through TakeAll, the layered script
					// (its packed arguments, multi.go's packLayer).
					var got core.Decision
					if rng.IntN(2) == 0 {
						history[len(history)-1] += " (layered)"
						out := []core.Decision{{}}
						_, err = takeN(rs, ctx, time.UnixMicro(at), []core.Request{req}, out)
						got = out[0]
					} else {
						got, _, err = take1(rs, ctx, time.UnixMicro(at), req)
					}
					require.NoError(t, err, "step %d: redis", i)
					if got != want {
						for _, h := range history[max(0, len(history)-40):] {
							t.Log(h)
						}
						if alg == core.SlidingWindowLog {
							z, _ := rs.client.ZRangeWithScores(ctx, rs.stateKey(key, p), 0, -1).Result()
							t.Logf("log %v", z)
						} else {
							h, _ := rs.client.HGetAll(ctx, rs.stateKey(key, p)).Result()
							t.Logf("state %v", h)
						}
						// Expected: memory, the reference; actual: redis.
						require.Equal(t, want, got, "step %d: key %s cost %d at %d (+%dµs in window)",
							i, key, cost, at, at%w)
					}
				}
			})
		}
	}
}

// diffShape is a policy's shape a randomized history runs under (a
// bucket's burst where it has one).
type diffShape struct {
	limit, burst int64
	window       time.Duration
}

// policies returns sh under every algorithm that takes it, named by name
// and the algorithm, with a lockout of a third of the window when locked.
func (sh diffShape) policies(name string, locked bool) []core.Policy {
	var ps []core.Policy
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		p := core.Policy{Name: name + "-" + string(alg), Algorithm: alg, Limit: sh.limit, Window: sh.window}
		if limits.IsBucket(alg) {
			p.Burst = sh.burst
		}
		if locked {
			p.Lockout = max(sh.window/3, time.Millisecond)
		}
		if p.Validate() == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// diffShapes are the shapes the randomized histories run under.
var diffShapes = []diffShape{
	{10, 0, time.Minute},
	{7, 0, time.Second + 333*time.Microsecond},
	{3, 0, 10 * time.Millisecond},
	{100, 0, time.Hour},
	{13, 29, 7*time.Second + 1},
	{1, 0, time.Millisecond},
	{limits.MaxLogLimit, 0, time.Minute},
	{999_999_999_937, 0, 366 * 24 * time.Hour},
	// Where float64 loses the small terms (issue 6, item 9).
	{limits.MaxLimit, 0, time.Minute + time.Microsecond},
	{1_000_000_000, 0, 24 * time.Hour},
	{32, limits.MaxLimit, time.Millisecond}, // the slowest deepest bucket
}

// diffAdvance moves a randomized history's clock on from now (µs): by
// nothing (the same microsecond), up to a unit's return (step), up to one
// or three spans, or a microsecond or three. It returns the new now and the
// time of the next request: now, or, one time in 20, a clock stepping
// back by up to step.
func diffAdvance(rng *rand.Rand, now, step, span int64) (int64, int64) {
	switch r := rng.IntN(100); {
	case r < 30: // same microsecond
	case r < 60:
		now += rng.Int64N(step + 1)
	case r < 80:
		now += rng.Int64N(span + 1)
	case r < 90:
		now += rng.Int64N(3*span + 1)
	default:
		now += 1 + rng.Int64N(3)
	}
	at := now
	if rng.IntN(20) == 0 { // a clock stepping back
		at -= rng.Int64N(step + 1)
	}
	return now, at
}
