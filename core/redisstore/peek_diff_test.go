package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestPeekMatchesMemstore drives the same randomized history into memstore,
// the reference arithmetic, and into Redis, as TestMatchesMemstore does
// (seeded by -diffseed, -diffsteps long; random keys, costs, time steps,
// clocks stepping back and resets, at explicit times), over the five
// algorithms at once, with and without a lockout, with peeks among the
// takes: a third of the steps peek, by Take, by TakeAll of one peek, or by
// TakeAll of peeks under every policy for one client key. Every Decision,
// the takes' after the peeks included, must be identical.
func TestPeekMatchesMemstore(t *testing.T) {
	rs, _, _ := newStore(t)
	ms := newMemStore(t)
	ctx := context.Background()
	// Far in the future, so that memstore's janitor (which reads the real
	// clock) never reclaims state the history still needs.
	base := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := *diffSteps
	for si, sh := range diffShapes {
		for _, locked := range []bool{false, true} {
			ps := sh.policies(fmt.Sprintf("peek%d", si), locked)
			t.Run(fmt.Sprintf("%d/lockout=%v", si, locked), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(*diffSeed+uint64(si), uint64(len(ps))))
				w := sh.window.Microseconds()
				step := max(w/sh.limit, 1)
				span := min(w, (24 * time.Hour).Microseconds())
				now := base.UnixMicro() + rng.Int64N(w)
				keys := []string{"a", "b", "c"}
				var history []string
				fail := func(what string, want, got any) {
					t.Helper()
					for _, h := range history[max(0, len(history)-40):] {
						t.Log(h)
					}
					// Expected: memory, the reference; actual: redis.
					require.Equal(t, want, got, what)
				}
				peeks := 0
				for i := range steps {
					var at int64
					now, at = diffAdvance(rng, now, step, span)
					key := keys[rng.IntN(len(keys))]
					p := ps[rng.IntN(len(ps))]
					c := limits.Capacity(p.Algorithm, p.Limit, p.Burst)
					when := time.UnixMicro(at)
					switch r := rng.IntN(100); {
					case r < 2:
						history = append(history, fmt.Sprintf("%d %s %s reset", i, key, p.Algorithm))
						require.NoError(t, rs.Reset(ctx, key, p), "step %d: redis Reset", i)
						require.NoError(t, ms.Reset(ctx, key, p), "step %d: memory Reset", i)
					case r < 12: // every policy's peek at once
						reqs := make([]core.Request, len(ps))
						for j, q := range ps {
							reqs[j] = core.Request{Key: key, Policy: q}
						}
						history = append(history, fmt.Sprintf("%d %s peek all at=%d", i, key, at))
						want, got := make([]core.Decision, len(reqs)), make([]core.Decision, len(reqs))
						require.NoError(t, errOf(takeN(ms, ctx, when, reqs, want)), "step %d: memory", i)
						require.NoError(t, errOf(takeN(rs, ctx, when, reqs, got)), "step %d: redis", i)
						if fmt.Sprint(want) != fmt.Sprint(got) {
							fail(fmt.Sprintf("step %d: TakeAll of peeks of %s at %d", i, key, at), want, got)
						}
						peeks += len(reqs)
					default:
						cost := int64(1)
						switch r := rng.IntN(100); {
						case r < 33:
							cost = 0
						case r < 40:
							cost = 1 + rng.Int64N(c)
						case r < 45:
							cost = c - rng.Int64N(min(c, 4))
						case r < 60:
							cost = 1 + rng.Int64N(min(c, 50))
						}
						req := core.Request{Key: key, Policy: p, Cost: cost}
						history = append(history, fmt.Sprintf("%d %s %s c=%d at=%d", i, key, p.Algorithm, cost, at))
						want, _, err := take1(ms, ctx, when, req)
						require.NoError(t, err, "step %d: memory", i)
						var got core.Decision
						if rng.IntN(2) == 0 {
							history[len(history)-1] += " (layered)"
							out := []core.Decision{{}}
							_, err = takeN(rs, ctx, when, []core.Request{req}, out)
							got = out[0]
						} else {
							got, _, err = take1(rs, ctx, when, req)
						}
						require.NoError(t, err, "step %d: redis", i)
						if got != want {
							fail(fmt.Sprintf("step %d: key %s %s cost %d at %d (+%dµs in window)", i, key, p.Algorithm, cost, at, at%w), want, got)
						}
						if cost == 0 {
							peeks++
						}
					}
				}
				require.Positive(t, peeks)
			})
		}
	}
}

// TestPeekLogSearch: a peek of a log that holds more than its limit (the
// client moved to a smaller plan, the same policy name) and members that
// have left the window, which a peek does not trim, searches for the unit
// that must leave first among the members still in the window: its
// RetryAfter, and every field, are memstore's, at times in and across the
// members' departures.
func TestPeekLogSearch(t *testing.T) {
	rs, _, _ := newStore(t)
	ms := newMemStore(t)
	ctx := context.Background()
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	big := core.Policy{Name: "moved", Algorithm: core.SlidingWindowLog, Limit: 200, Window: time.Second}
	for i := range 60 { // 180 units, in members of 1 to 5
		req := core.Request{Key: "k", Policy: big, Cost: 1 + int64(i%5)}
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		want, _, err := take1(ms, ctx, at, req)
		require.NoError(t, err)
		got, _, err := take1(rs, ctx, at, req)
		require.NoError(t, err)
		require.Equal(t, want, got, "take %d", i)
	}
	for _, limit := range []int64{1, 7, 50, 120, 179, 180} {
		small := big
		small.Limit = limit
		for _, dt := range []time.Duration{0, 500 * time.Millisecond, time.Second, time.Second + 5*time.Millisecond, 1234 * time.Millisecond, 1500 * time.Millisecond, 1590 * time.Millisecond, 1600 * time.Millisecond} {
			at := t0.Add(dt)
			req := core.Request{Key: "k", Policy: small}
			want, _, err := take1(ms, ctx, at, req)
			require.NoError(t, err)
			got, _, err := take1(rs, ctx, at, req)
			require.NoError(t, err)
			require.Equal(t, want, got, "limit %d, peek at t0+%v", limit, dt)
			out := []core.Decision{{}}
			require.NoError(t, errOf(takeN(rs, ctx, at, []core.Request{req}, out)))
			require.Equal(t, want, out[0], "limit %d, layered peek at t0+%v", limit, dt)
		}
	}
}
