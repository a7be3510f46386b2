package redisstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// peekPolicy returns the policy of the peek tests for algorithm a: 5 a
// minute, with a 30s lockout when locked.
func peekPolicy(a core.Algorithm, locked bool) core.Policy {
	p := core.Policy{Name: "peek-" + string(a), Algorithm: a, Limit: 5, Window: time.Minute}
	if locked {
		p.Name += "-locked"
		p.Lockout = 30 * time.Second
	}
	return p
}

// take is one request of a history: its cost at t0 plus at.
type take struct {
	at   time.Duration
	cost int64
}

// play makes the takes of h for key under p, from t0.
func play(t testing.TB, s core.Store, key string, p core.Policy, t0 time.Time, h []take) {
	t.Helper()
	for _, tk := range h {
		_, _, err := take1(s, context.Background(), t0.Add(tk.at), core.Request{Key: key, Policy: p, Cost: tk.cost})
		require.NoError(t, err, "%s: %s: take %+v", p.Name, key, tk)
	}
}

// Histories of the peek tests, of 5-a-minute policies.
var (
	partialHistory = []take{{0, 2}, {time.Millisecond, 1}}
	fullHistory    = []take{{0, 3}, {2 * time.Millisecond, 2}}
	deniedHistory  = []take{{0, 5}, {3 * time.Millisecond, 1}} // the last is denied: under a lockout, it locks out
	// the first take has left the log's window 2s or more after t0.
	oldHistory  = []take{{-58 * time.Second, 2}, {0, 2}}
	clockBack   = []take{{0, 1}, {5 * time.Millisecond, 1}, {2 * time.Millisecond, 1}}
	peekHistory = map[string][]take{
		"empty": nil, "partial": partialHistory, "full": fullHistory, "denied": deniedHistory,
		"old": oldHistory, "clock-back": clockBack,
	}
)

// keyState is a key's DUMP and PTTL.
type keyState struct {
	dump string
	pttl time.Duration
}

// stateOf returns every key of prefix with its DUMP and PTTL.
func stateOf(t testing.TB, c redis.UniversalClient, prefix string) map[string]keyState {
	t.Helper()
	ctx := context.Background()
	m := map[string]keyState{}
	for _, k := range scanKeys(t, ctx, c, prefix) {
		dump, err := c.Dump(ctx, k).Result()
		require.NoError(t, err, "DUMP %s", k)
		pttl, err := c.PTTL(ctx, k).Result()
		require.NoError(t, err, "PTTL %s", k)
		m[k] = keyState{dump, pttl}
	}
	return m
}

// requireUnchanged requires that the keys of prefix are those of before,
// read after since, byte for byte, their TTLs only ticked down, by no more
// than the time since and a second (before is read around since, and a
// busy machine's gaps are not what this checks: an expiry moved).
func requireUnchanged(t *testing.T, c redis.UniversalClient, prefix string, before map[string]keyState, since time.Time) {
	t.Helper()
	after := stateOf(t, c, prefix)
	elapsed := time.Since(since)
	require.Equal(t, slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)), "the keys: none created, none deleted")
	for k, b := range before {
		a := after[k]
		assert.Equal(t, b.dump, a.dump, "%s: DUMP", k)
		assert.Positive(t, a.pttl, "%s: PTTL", k)
		assert.LessOrEqual(t, a.pttl, b.pttl, "%s: PTTL not increased", k)
		assert.GreaterOrEqual(t, a.pttl, b.pttl-elapsed-testwait.D(time.Second), "%s: PTTL only ticked down", k)
	}
}

// TestPeekWritesNothing: for every algorithm, with and without a lockout,
// over states with room, full, locked out, with a log member past the
// window, and none at all: 1,400 peeks, by Take (at explicit times, some
// before the last admission, and at Redis TIME) and by TakeAll of three
// peeks over three policies, leave every key byte for byte as it was,
// its TTL only ticking down, and create none.
func TestPeekWritesNothing(t *testing.T) {
	algs := limits.Algorithms[core.Algorithm]()
	for _, locked := range []bool{false, true} {
		for ai, a := range algs {
			t.Run(fmt.Sprintf("%s/lockout=%v", a, locked), func(t *testing.T) {
				s, _, c := newStore(t)
				ctx := context.Background()
				// A second past a minute from now, so that the windows of
				// the peeks at explicit times are the history's, and a
				// peek at Redis TIME is before the last admission.
				t0 := time.Now().Truncate(time.Minute).Add(time.Minute + time.Second)
				ps := []core.Policy{peekPolicy(a, locked), peekPolicy(algs[(ai+1)%len(algs)], locked), peekPolicy(algs[(ai+2)%len(algs)], locked)}
				keys := []string{"room", "full", "old", "never"}
				if locked {
					keys = append(keys, "locked")
				}
				for _, p := range ps {
					play(t, s, "room", p, t0, partialHistory)
					if locked {
						play(t, s, "full", p, t0, fullHistory) // full, never denied: no strike
						play(t, s, "locked", p, t0, deniedHistory)
					} else {
						play(t, s, "full", p, t0, deniedHistory)
					}
					play(t, s, "old", p, t0, oldHistory)
				}
				start := time.Now()
				before := stateOf(t, c, s.prefix)
				require.NotEmpty(t, before)
				if locked {
					require.Contains(t, before, lockKey(s.stateKey("locked", ps[0])), "the lockout struck")
					require.NotContains(t, before, lockKey(s.stateKey("full", ps[0])), "no strike for the full key")
				}
				peeks := 0
				out := make([]core.Decision, len(ps))
				for i := range 200 {
					at := t0.Add(time.Duration(i*17%5000) * time.Millisecond)
					switch i % 10 {
					case 3, 6:
						at = time.Time{} // Redis TIME
					case 9:
						at = t0.Add(-2 * time.Second) // before the last admission
					}
					for _, key := range keys {
						d, _, err := take1(s, ctx, at, core.Request{Key: key, Policy: ps[0]})
						require.NoError(t, err, "peek %s at %v", key, at)
						peeks++
						if !at.IsZero() {
							switch key {
							case "room", "never":
								assert.True(t, d.Allowed, "peek %s at %v: Allowed", key, at)
							case "full":
								assert.False(t, d.Allowed, "peek %s at %v: Allowed", key, at)
								assert.False(t, d.LockedOut, "peek %s at %v: LockedOut", key, at)
							case "locked":
								assert.True(t, d.LockedOut, "peek %s at %v: LockedOut", key, at)
							}
						}
					}
					key := keys[i%len(keys)]
					reqs := make([]core.Request, len(ps))
					for j, p := range ps {
						reqs[j] = core.Request{Key: key, Policy: p}
					}
					require.NoError(t, errOf(takeN(s, ctx, at, reqs, out)), "TakeAll of peeks of %s at %v", key, at)
					peeks += len(reqs)
				}
				require.GreaterOrEqual(t, peeks, 1000)
				requireUnchanged(t, c, s.prefix, before, start)
			})
		}
	}
}

// peekTimes are the times of TestPeekIsTheState's peeks, after t0: before
// the last admission, in the window, after a lockout, past the window.
var peekTimes = []time.Duration{
	-time.Second, 0, time.Millisecond, 3 * time.Millisecond, 2 * time.Second, 5 * time.Second,
	30 * time.Second, 59 * time.Second, 61 * time.Second, 2 * time.Minute,
}

// TestPeekIsTheState: at the same explicit time after the same history, a
// peek is decided as a take of cost 1 on a twin key is (Allowed,
// RetryAfter, Delay, LockedOut), and reports the Remaining and ResetAfter
// that a denied take (of the whole capacity) on another twin reports; when
// even that take is admitted, the quota is whole. During a lockout a peek
// is the locked-out decision; otherwise a peek under a lockout policy is
// decided as under the same policy without one.
func TestPeekIsTheState(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)
	n := 0
	for _, a := range limits.Algorithms[core.Algorithm]() {
		for _, locked := range []bool{false, true} {
			p := peekPolicy(a, locked)
			plain := peekPolicy(a, false)
			capacity := limits.Capacity(p.Algorithm, p.Limit, p.Burst)
			for name, h := range peekHistory {
				for _, dt := range peekTimes {
					n++
					at := t0.Add(dt)
					what := fmt.Sprintf("%s lockout=%v %s at t0%+v", a, locked, name, dt)
					key := func(role string) string { return fmt.Sprintf("%s-%d", role, n) }
					for _, role := range []string{"peek", "one", "whole"} {
						play(t, s, key(role), p, t0, h)
						if locked {
							play(t, s, key(role+"-plain"), plain, t0, h)
						}
					}
					peek, _, err := take1(s, ctx, at, core.Request{Key: key("peek"), Policy: p})
					require.NoError(t, err, what)
					twin := p
					if locked && !peek.LockedOut {
						twin = plain // the lockout plays no part: decide the algorithm alone
						key = func(role string) string { return fmt.Sprintf("%s-plain-%d", role, n) }
					}
					one, _, err := take1(s, ctx, at, core.Request{Key: key("one"), Policy: twin, Cost: 1})
					require.NoError(t, err, what)
					whole, _, err := take1(s, ctx, at, core.Request{Key: key("whole"), Policy: twin, Cost: capacity})
					require.NoError(t, err, what)

					assert.Equal(t, one.Allowed, peek.Allowed, "%s: Allowed", what)
					assert.Equal(t, one.RetryAfter, peek.RetryAfter, "%s: RetryAfter", what)
					assert.Equal(t, one.Delay, peek.Delay, "%s: Delay", what)
					assert.Equal(t, one.LockedOut, peek.LockedOut, "%s: LockedOut", what)
					assert.Equal(t, capacity, peek.Limit, "%s: Limit", what)
					if whole.Allowed {
						assert.Equal(t, capacity, peek.Remaining, "%s: Remaining of a whole quota", what)
						assert.Zero(t, peek.ResetAfter, "%s: ResetAfter of a whole quota", what)
					} else {
						assert.Equal(t, whole.Remaining, peek.Remaining, "%s: Remaining", what)
						assert.Equal(t, whole.ResetAfter, peek.ResetAfter, "%s: ResetAfter", what)
					}
				}
			}
		}
	}
	// The histories reach every kind of peek.
	for _, a := range limits.Algorithms[core.Algorithm]() {
		p := peekPolicy(a, true)
		play(t, s, "kinds", p, t0, deniedHistory)
		d, _, err := take1(s, ctx, t0.Add(time.Second), core.Request{Key: "kinds", Policy: p})
		require.NoError(t, err)
		assert.True(t, d.LockedOut, "%s: a peek during a lockout", a)
		assert.Positive(t, d.RetryAfter, "%s: a peek during a lockout: the time left", a)
	}
}

// TestPeekTakeAll: TakeAll of peeks over five algorithms, one with a
// lockout, on four client keys, is one EVALSHA, and each decision is the
// request's own peek (Take of cost 0), whatever the others decide; a
// TakeAll that mixes peeks and other requests fails, wrapping
// core.ErrInvalidOption, without a command.
func TestPeekTakeAll(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	h := newCommandCounter()
	c.AddHook(h)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	<-s.checked // New's check of the configuration is done: its commands are not counted
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)
	var reqs []core.Request
	for i, a := range limits.Algorithms[core.Algorithm]() {
		p := peekPolicy(a, i == 1)
		key := fmt.Sprintf("k%d", i%4)
		play(t, s, key, p, t0, [][]take{partialHistory, deniedHistory, fullHistory, oldHistory, nil}[i])
		reqs = append(reqs, core.Request{Key: key, Policy: p})
	}
	out := make([]core.Decision, len(reqs))
	for _, at := range []time.Time{t0.Add(time.Second), t0.Add(-time.Second), {}} {
		require.NoError(t, errOf(takeN(s, ctx, at, reqs, out))) // loads the script
		h.reset()
		require.NoError(t, errOf(takeN(s, ctx, at, reqs, out)))
		names, pipelines := h.snapshot()
		assert.Equal(t, map[string]int{"evalsha": 1}, names, "at %v: commands of TakeAll of peeks", at)
		assert.Zero(t, pipelines, "pipelines")
		for i, r := range reqs {
			want, _, err := take1(s, ctx, at, r)
			require.NoError(t, err)
			if at.IsZero() && want.LockedOut {
				// The time left on the lockout is counted from Redis
				// TIME, a moment later: less by the time between the two
				// calls (a millisecond, more on a busy machine; this is
				// not a test of timing).
				assert.InDelta(t, out[i].RetryAfter, want.RetryAfter, float64(time.Second), "at %v: request %d: RetryAfter", at, i)
				assert.InDelta(t, out[i].ResetAfter, want.ResetAfter, float64(time.Second), "at %v: request %d: ResetAfter", at, i)
				want.RetryAfter, want.ResetAfter = out[i].RetryAfter, out[i].ResetAfter
			}
			assert.Equal(t, want, out[i], "at %v: request %d: its own peek", at, i)
		}
		if !at.IsZero() {
			assert.True(t, out[0].Allowed, "partial")
			assert.True(t, out[1].LockedOut, "locked out")
			assert.False(t, out[2].Allowed, "full")
			assert.True(t, out[4].Allowed, "no state")
		}
	}

	h.reset()
	for k := range reqs {
		mixed := slices.Clone(reqs)
		mixed[k].Cost = 1
		_, err := takeN(s, ctx, t0, mixed, out)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "a take at %d among peeks", k)
		mixed = slices.Clone(reqs)
		for j := range mixed {
			mixed[j].Cost = 1
		}
		mixed[k].Cost = 0
		_, err = takeN(s, ctx, t0, mixed, out)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "a peek at %d among takes", k)
	}
	names, pipelines := h.snapshot()
	assert.Empty(t, names, "commands of invalid TakeAlls")
	assert.Zero(t, pipelines)

	// One round trip on a single Take too.
	h.reset()
	_, _, err := take1(s, ctx, t0, reqs[0])
	require.NoError(t, err)
	names, _ = h.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 1}, names, "commands of a peek")
}

// TestPeekCluster: over a Redis Cluster, TakeAll of peeks whose keys are
// in five slots over the three masters is one EVALSHA per slot, sent at
// once, with no take nor undo step; each decision is the twin keys'
// expectation (a take of cost 1 for Allowed, RetryAfter, Delay and
// LockedOut, a denied take for Remaining and ResetAfter); and no key is
// written or created.
func TestPeekCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	counter := newCommandCounter()
	c.AddHook(counter)
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	var steps afterSteps
	s.afterStep = steps.step
	stepped := 0
	ctx := context.Background()
	keys := spreadKeys(t, s, c, 5)
	t0 := time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC)
	histories := [][]take{partialHistory, deniedHistory, fullHistory, oldHistory, clockBack}
	var reqs []core.Request
	for i, a := range limits.Algorithms[core.Algorithm]() {
		p := peekPolicy(a, false)
		reqs = append(reqs, core.Request{Key: keys[i], Policy: p})
		play(t, s, keys[i], p, t0, histories[i])
	}
	// A locked-out layer in the first slot.
	lp := peekPolicy(core.TokenBucket, true)
	play(t, s, keys[0], lp, t0, deniedHistory)
	reqs = append(reqs, core.Request{Key: keys[0], Policy: lp})
	histories = append(histories, deniedHistory)
	<-s.checked // New's check of the configuration is done: its commands are not counted
	out := make([]core.Decision, len(reqs))
	at := t0.Add(time.Second)
	require.NoError(t, errOf(takeN(s, ctx, at, reqs, out))) // loads the scripts
	start := time.Now()
	before := stateOf(t, c, s.prefix)
	steps.arm(func() { stepped++ }, func() { stepped++ })
	counter.reset()
	require.NoError(t, errOf(takeN(s, ctx, at, reqs, out)))
	names, pipelines := counter.snapshot()
	assert.Equal(t, map[string]int{"evalsha": 5}, names, "one script per slot, nothing taken nor undone")
	assert.Zero(t, pipelines)
	assert.Equal(t, 1, stepped, "one step")
	requireUnchanged(t, c, s.prefix, before, start)

	for i, r := range reqs {
		h := histories[i]
		capacity := limits.Capacity(r.Policy.Algorithm, r.Policy.Limit, r.Policy.Burst)
		one, whole := "one-"+r.Key, "whole-"+r.Key
		play(t, s, one, r.Policy, t0, h)
		play(t, s, whole, r.Policy, t0, h)
		dOne, _, err := take1(s, ctx, at, core.Request{Key: one, Policy: r.Policy, Cost: 1})
		require.NoError(t, err)
		dWhole, _, err := take1(s, ctx, at, core.Request{Key: whole, Policy: r.Policy, Cost: capacity})
		require.NoError(t, err)
		assert.Equal(t, dOne.Allowed, out[i].Allowed, "layer %d: Allowed", i)
		assert.Equal(t, dOne.RetryAfter, out[i].RetryAfter, "layer %d: RetryAfter", i)
		assert.Equal(t, dOne.Delay, out[i].Delay, "layer %d: Delay", i)
		assert.Equal(t, dOne.LockedOut, out[i].LockedOut, "layer %d: LockedOut", i)
		require.False(t, dWhole.Allowed, "layer %d: the whole capacity is denied", i)
		assert.Equal(t, dWhole.Remaining, out[i].Remaining, "layer %d: Remaining", i)
		assert.Equal(t, dWhole.ResetAfter, out[i].ResetAfter, "layer %d: ResetAfter", i)
	}
	assert.True(t, out[0].Allowed, "partial")
	assert.False(t, out[1].Allowed, "denied")
	assert.True(t, out[len(out)-1].LockedOut, "locked out")
}
