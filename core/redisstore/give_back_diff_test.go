package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// admission is one admission of a randomized history that may still be
// given back: its client key and policy, the time the stores returned for
// it, the units not given back yet, and the take it was part of (a TakeAll
// admits several at one time).
type admission struct {
	key    string
	policy core.Policy
	at     int64
	left   int64
	take   int
}

// TestGiveBackMatchesMemstore drives the same randomized history into
// memstore, the reference arithmetic, and into Redis, as
// TestPeekMatchesMemstore does (seeded by -diffseed, -diffsteps long;
// random keys, costs, time steps and resets, at explicit times), over the
// five algorithms at once, with and without a lockout, with takes (by
// Take, by TakeAll of one, by TakeAll of every policy for one client key),
// peeks and give-backs among them. A give-back is dated with the time the
// stores returned for an admission (at once, after other admissions, or
// late, once its window has passed or its key was reset), of a random
// part of what it took and has not given back yet, by Take, by TakeAll of
// one, or by TakeAll of the admissions of one layered take; a peek at the
// history's time follows it. Every Decision and every time returned must
// be identical.
//
// The clock never steps back here, unlike the other histories: the two
// stores keep a different time of the last admission, which decides a
// request dated before it, in a case that only such a request tells
// apart, and that has nothing to do with give-backs: memstore forgets a
// layer's expired state when the layered take it was part of is denied
// (taken.undo clears a fresh state), where Redis leaves the state as it
// was, its last admission included. (A give-back that removes a log's
// newest entry moves memstore's last admission back to the entry before
// it, as Redis knows it from the members left.)
func TestGiveBackMatchesMemstore(t *testing.T) {
	rs, _, _ := newStore(t)
	ms := newMemStore(t)
	ctx := context.Background()
	// Far in the future, so that memstore's janitor (which reads the real
	// clock) never reclaims state the history still needs.
	base := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := *diffSteps
	for si, sh := range diffShapes {
		for _, locked := range []bool{false, true} {
			ps := sh.policies(fmt.Sprintf("gb%d-%v", si, locked), locked)
			t.Run(fmt.Sprintf("%d/lockout=%v", si, locked), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(*diffSeed+uint64(si), 7+uint64(len(ps))))
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
					for _, k := range keys {
						for _, p := range ps {
							t.Logf("redis: %s %s: %s", k, p.Algorithm, stateString(rs, k, p))
						}
					}
					// Expected: memory, the reference; actual: redis.
					require.Equal(t, want, got, what)
				}
				// both decides reqs in both stores at at, by TakeAll when
				// all or there are several, else by Take or TakeAll of one,
				// and requires the same decisions and times.
				both := func(i int, what string, at int64, reqs []core.Request, all bool) []core.Decision {
					t.Helper()
					when := time.UnixMicro(at)
					want, got := make([]core.Decision, len(reqs)), make([]core.Decision, len(reqs))
					var wt, gt time.Time
					var err error
					switch {
					case all || len(reqs) > 1:
						wt, err = takeN(ms, ctx, when, reqs, want)
						require.NoError(t, err, "step %d: memory: %s", i, what)
						gt, err = takeN(rs, ctx, when, reqs, got)
					case rng.IntN(2) == 0:
						history[len(history)-1] += " (layered)"
						wt, err = takeN(ms, ctx, when, reqs, want)
						require.NoError(t, err, "step %d: memory: %s", i, what)
						gt, err = takeN(rs, ctx, when, reqs, got)
					default:
						want[0], wt, err = take1(ms, ctx, when, reqs[0])
						require.NoError(t, err, "step %d: memory: %s", i, what)
						got[0], gt, err = take1(rs, ctx, when, reqs[0])
					}
					require.NoError(t, err, "step %d: redis: %s", i, what)
					if fmt.Sprint(want) != fmt.Sprint(got) {
						fail(fmt.Sprintf("step %d: %s at %d", i, what, at), want, got)
					}
					require.Equal(t, at, wt.UnixMicro(), "step %d: %s: memory's time", i, what)
					require.Equal(t, at, gt.UnixMicro(), "step %d: %s: redis's time", i, what)
					require.Equal(t, gt, gt.Round(0), "step %d: %s: redis's time has no monotonic reading", i, what)
					return got
				}
				var admitted []admission
				takes, gaveBack := 0, 0
				for i := range steps {
					// Never a clock stepping back (see the test's comment).
					now, _ = diffAdvance(rng, now, step, span)
					at := now
					key := keys[rng.IntN(len(keys))]
					p := ps[rng.IntN(len(ps))]
					c := limits.Capacity(p.Algorithm, p.Limit, p.Burst)
					switch r := rng.IntN(100); {
					case r < 2:
						history = append(history, fmt.Sprintf("%d %s %s reset", i, key, p.Algorithm))
						require.NoError(t, rs.Reset(ctx, key, p), "step %d: redis Reset", i)
						require.NoError(t, ms.Reset(ctx, key, p), "step %d: memory Reset", i)
					case r < 10: // a take under every policy at once
						reqs := make([]core.Request, len(ps))
						for j, q := range ps {
							reqs[j] = core.Request{Key: key, Policy: q, Cost: 1 + rng.Int64N(min(limits.Capacity(q.Algorithm, q.Limit, q.Burst), 3))}
						}
						history = append(history, fmt.Sprintf("%d %s take all at=%d", i, key, at))
						out := both(i, "TakeAll", at, reqs, true)
						all := true
						for _, d := range out {
							all = all && d.Allowed
						}
						if all { // all or nothing
							takes++
							for _, r := range reqs {
								admitted = append(admitted, admission{key, r.Policy, at, r.Cost, i})
							}
						}
					case r < 25 && len(admitted) > 0: // a give-back
						// Half of them of one of the last few admissions.
						k := rng.IntN(len(admitted))
						if rng.IntN(2) == 0 {
							k = len(admitted) - 1 - rng.IntN(min(len(admitted), 4))
						}
						a := &admitted[k]
						if a.left == 0 {
							continue
						}
						give := 1 + rng.Int64N(a.left)
						a.left -= give
						gaveBack++
						history = append(history, fmt.Sprintf("%d %s %s give back %d of at=%d (now %d)", i, a.key, a.policy.Algorithm, give, a.at, now))
						req := core.Request{Key: a.key, Policy: a.policy, Cost: -give}
						out := both(i, "give-back", a.at, []core.Request{req}, false)
						ac := limits.Capacity(a.policy.Algorithm, a.policy.Limit, a.policy.Burst)
						require.Equal(t, core.Decision{Allowed: true, Limit: ac}, out[0], "step %d: a give-back's decision", i)
						history = append(history, fmt.Sprintf("%d %s %s peek at=%d", i, a.key, a.policy.Algorithm, now))
						both(i, "peek after a give-back", now, []core.Request{{Key: a.key, Policy: a.policy}}, false)
					case r < 30 && len(admitted) > 0: // the give-backs of one layered take
						last := admitted[len(admitted)-1-rng.IntN(min(len(admitted), 8))]
						var reqs []core.Request
						for k := range admitted {
							if a := &admitted[k]; a.take == last.take && a.key == last.key && a.left > 0 {
								give := 1 + rng.Int64N(a.left)
								a.left -= give
								reqs = append(reqs, core.Request{Key: a.key, Policy: a.policy, Cost: -give})
							}
						}
						if len(reqs) == 0 {
							continue
						}
						gaveBack += len(reqs)
						history = append(history, fmt.Sprintf("%d %s give back all %d of at=%d (now %d)", i, last.key, len(reqs), last.at, now))
						out := both(i, "TakeAll of give-backs", last.at, reqs, true)
						for j, r := range reqs {
							rc := limits.Capacity(r.Policy.Algorithm, r.Policy.Limit, r.Policy.Burst)
							require.Equal(t, core.Decision{Allowed: true, Limit: rc}, out[j], "step %d: a give-back's decision", i)
						}
						peeks := make([]core.Request, len(ps))
						for j, q := range ps {
							peeks[j] = core.Request{Key: last.key, Policy: q}
						}
						history = append(history, fmt.Sprintf("%d %s peek all at=%d", i, last.key, now))
						both(i, "peeks after give-backs", now, peeks, true)
					default:
						cost := int64(1)
						switch r := rng.IntN(100); {
						case r < 15:
							cost = 0
						case r < 25:
							cost = 1 + rng.Int64N(c)
						case r < 30:
							cost = c - rng.Int64N(min(c, 4))
						case r < 50:
							cost = 1 + rng.Int64N(min(c, 50))
						}
						history = append(history, fmt.Sprintf("%d %s %s c=%d at=%d", i, key, p.Algorithm, cost, at))
						out := both(i, "take", at, []core.Request{{Key: key, Policy: p, Cost: cost}}, false)
						if cost > 0 && out[0].Allowed {
							takes++
							admitted = append(admitted, admission{key, p, at, cost, i})
						}
					}
				}
				require.Positive(t, takes)
				require.Positive(t, gaveBack)
			})
		}
	}
}

// stateString returns the state of key under p in s's Redis, for a
// failure's log: a log's members, or a state's packed numbers.
func stateString(s *Store, key string, p core.Policy) string {
	ctx := context.Background()
	k := s.stateKey(key, p)
	if p.Algorithm == core.SlidingWindowLog {
		z, err := s.client.ZRangeWithScores(ctx, k, 0, -1).Result()
		return fmt.Sprint(z, err)
	}
	b, err := s.client.Get(ctx, k).Bytes()
	if err != nil {
		return err.Error()
	}
	var fs []float64
	for i := 0; i+8 <= len(b); i += 8 {
		fs = append(fs, math.Float64frombits(binary.LittleEndian.Uint64(b[i:])))
	}
	return fmt.Sprint(fs)
}
