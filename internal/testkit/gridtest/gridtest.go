// Package gridtest drives a grid of overrides (limit, burst, scale, and a
// load factor on top) against configured policies of every algorithm,
// including the extremes (a limit of 1 and of limits.MaxLimit, windows of
// limits.MinWindow and limits.MaxWindow, slow rates with big bursts), over a
// store, through a source of overrides (an overrides.Set, a
// rediswatch.Overrides). For each case it asserts, at explicit times,
// that no decision fails, that the policy in force is valid, and that the
// admitted cost never exceeds what the override allows as written (its
// values applied without any clamp: the "literal" policy, which may be
// invalid), or, where the override's own values cannot make a valid
// policy, what the configured policy allows. RunScales crosses the same
// policies with scale factors alone (a reputation band, the load signal,
// a plan of the user's). Bounds are computed here,
// from the algorithms' definitions (core.Algorithm), not from the code
// under test.
package gridtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/overrides"
)

// Source is where a case puts its override.
type Source struct {
	// Adjust is the policy source the Limiter consults.
	Adjust core.PolicySource
	// Put puts an override of layer, as Set.Put or Overrides.Put.
	Put func(layer string, o overrides.Override) error
	// Logs returns what the source has logged so far.
	Logs func() string
}

// Config is one run of the grid.
type Config struct {
	// Store decides every case; each case has keys of its own.
	Store core.Store
	// NewSource returns a fresh source for one case.
	NewSource func(t *testing.T) Source
	// Loads are the load factors (overrides.Load's scale) the grid
	// crosses the overrides with; 1 means no Load.
	Loads []float64
	// Every, when above 1, runs one case in Every (and every case of
	// Issue): for a slow source.
	Every int
	// MaxDrain, when not 0, leaves out (and counts, in the test's log)
	// the cases where the usage a client built under the configured
	// policy takes longer than MaxDrain to drain at the override's rate:
	// the Redis store's bucket scripts search for the RetryAfter of such
	// a level past 2^53 microseconds, where float64 has no whole
	// microseconds, and run until Redis's busy-script limit, blocking the
	// server (a bug of core/redisstore, reported to its owner; the memory
	// store runs these cases).
	MaxDrain time.Duration
}

// Issue is the hardening issue's policy: a token bucket of 100 an hour
// with a burst of 10,000.
var Issue = core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 100, Window: time.Hour, Burst: 10_000}

// maxBurstFor1PerMs is the biggest burst a bucket of 1 per millisecond
// refills within limits.MaxWindow.
const maxBurstFor1PerMs = int64(limits.MaxWindow / limits.MinWindow)

// Policies returns the configured policies of the grid, every algorithm.
func Policies() []core.Policy {
	var out []core.Policy
	windows := []core.Policy{
		{Limit: 1, Window: limits.MinWindow},
		{Limit: 100, Window: time.Hour},
		{Limit: limits.MaxLimit, Window: time.Second},
		{Limit: 5, Window: limits.MaxWindow},
	}
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter} {
		for _, p := range windows {
			p.Algorithm = alg
			if alg == core.SlidingWindowLog && p.Limit > limits.MaxLogLimit {
				p.Limit = limits.MaxLogLimit
			}
			out = append(out, p)
		}
	}
	buckets := []core.Policy{
		{Limit: 100, Window: time.Hour, Burst: 10_000}, // the issue's
		{Limit: 1, Window: limits.MinWindow},
		{Limit: 3, Window: time.Hour, Burst: 3 * 8784}, // a burst that takes MaxWindow to fill
		{Limit: limits.MaxLimit, Window: time.Second},
		{Limit: 5, Window: limits.MaxWindow},
		{Limit: 1, Window: limits.MinWindow, Burst: maxBurstFor1PerMs},
		{Limit: 3, Window: 24 * time.Hour, Burst: 800}, // the reputation issue's (Reputation)
	}
	for _, alg := range []core.Algorithm{core.TokenBucket, core.LeakyBucket} {
		for _, p := range buckets {
			p.Algorithm = alg
			out = append(out, p)
		}
	}
	for i := range out {
		out[i].Name = "api"
	}
	return out
}

// Overrides returns the overrides of the grid.
func Overrides() []overrides.Override {
	return []overrides.Override{
		{Limit: 1},
		{Limit: limits.MaxLimit},
		{Burst: 1},
		{Burst: limits.MaxLimit},
		{Limit: 1, Burst: 10_000},
		{Limit: 200_000},
		{Scale: 1e-6},
		{Scale: 0.5},
		{Scale: limits.MaxOverrideScale},
		{Limit: 3, Scale: 0.5},
		{Limit: 3, Burst: 3 * 8784, Scale: 0.5},
		{Limit: 100_000, Scale: 10},
	}
}

// Run runs the grid.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	n, left := 0, 0
	defer func() {
		if left > 0 {
			t.Logf("%d cases left out: a usage that drains in more than %v at the override's rate (see Config.MaxDrain)", left, cfg.MaxDrain)
		}
	}()
	for pi, p := range Policies() {
		for oi, o := range Overrides() {
			for _, s := range cfg.Loads {
				for _, used := range []bool{false, true} {
					n++
					if cfg.Every > 1 && n%cfg.Every != 0 && p != Issue {
						continue
					}
					c := gridCase{policy: p, o: o, load: s, used: used, key: fmt.Sprintf("grid-%d-%d-%v-%v", pi, oi, s, used)}
					if cfg.MaxDrain > 0 && c.drain() > cfg.MaxDrain.Microseconds() {
						left++
						continue
					}
					t.Run(c.name(), func(t *testing.T) { c.run(t, cfg) })
				}
			}
		}
	}
}

type gridCase struct {
	policy core.Policy
	o      overrides.Override
	load   float64
	used   bool // the client used the configured policy before the Put
	key    string
}

// drain is how long, in microseconds, the most a client may use under
// the configured policy (a bucket's capacity) takes to drain at the
// override's rate, in the used cases of the buckets; else 0.
func (c gridCase) drain() int64 {
	if !c.used || !limits.IsBucket(c.policy.Algorithm) {
		return 0
	}
	lp := literal(c.policy, overrides.Override{}, c.load)
	carried := limits.Capacity(lp.Algorithm, lp.Limit, lp.Burst)
	rate := literal(c.policy, c.o, c.load).Limit
	d := new(big.Int).Mul(big.NewInt(carried), big.NewInt(c.policy.Window.Microseconds()))
	d.Quo(d, big.NewInt(rate))
	if !d.IsInt64() {
		return math.MaxInt64
	}
	return d.Int64()
}

func (c gridCase) name() string {
	v := "fresh"
	if c.used {
		v = "used"
	}
	return strings.NewReplacer(" ", "_", "=", "").Replace(fmt.Sprintf("%s/%s/%s/load%v/%s", c.policy.Algorithm, limits.DefaultName(c.policy.Algorithm, c.policy.Limit, c.policy.Window, c.policy.Burst), c.o, c.load, v))
}

// t0 is the grid's start: aligned to no window in particular.
var t0 = time.Date(2026, 12, 3, 12, 0, 0, 123_456_000, time.UTC)

func (c gridCase) run(t *testing.T, cfg Config) {
	src := cfg.NewSource(t)
	opts := []core.Option{core.WithPolicySource(src.Adjust)}
	if c.load != 1 {
		load, err := overrides.NewLoad(func() float64 { return 1 }, overrides.LoadConfig{High: 0.5, Low: 0.1, Step: 1, MinScale: c.load})
		require.NoError(t, err)
		require.InDelta(t, c.load, load.Update(), 1e-12)
		opts = append(opts, core.WithPolicySource(load))
	}
	l, err := core.NewLimiter(cfg.Store, []core.Policy{c.policy}, opts...)
	require.NoError(t, err)
	configured := literal(c.policy, overrides.Override{}, c.load)

	if c.used {
		// The client takes all it may under the configured policy.
		inForce := greedy(t, l, c.key, t0, limits.Capacity(configured.Algorithm, configured.Limit, configured.Burst))
		noLooser(t, inForce.in, configured, true, "before the override")
	}
	unfit := ownValuesUnfit(c.policy, c.o)
	err = src.Put("api", c.o)
	if c.used && unfit {
		// The source has adjusted the policy: it refuses at once.
		require.Error(t, err, "an override whose own values cannot make a valid policy is refused where it is written")
		assert.ErrorIs(t, err, core.ErrInvalidOption)
		assert.ErrorIs(t, err, core.ErrInvalidOption)
	} else {
		require.NoError(t, err, "an override that can apply is never refused")
	}

	lit := literal(c.policy, c.o, c.load)
	bound := lit
	if unfit {
		bound = configured // refused, or not applied: the configured policy stays
	}
	// Counted requests, at times across several windows.
	w := c.policy.Window
	var admitted int64
	var first, last time.Time
	var in core.Policy
	for i, at := range []time.Duration{0, w / 3, w / 2, w, w + w/2, 2*w + time.Microsecond, 5 * w} {
		now := t0.Add(at)
		g := greedy(t, l, c.key, now, max(limits.Capacity(lit.Algorithm, lit.Limit, lit.Burst), limits.Capacity(configured.Algorithm, configured.Limit, configured.Burst)))
		if i == 0 {
			first, in = now, g.in
			if unfit {
				noLooser(t, in, configured, true, "an override that cannot apply leaves the last good policy (here, the configured one) in force")
			} else {
				// Exact when the Set's result is valid too: a Set cannot
				// know that a Load after it will bring an invalid result
				// back within bounds, and clamps it (tighter).
				noLooser(t, in, lit, literal(c.policy, c.o, 1).Validate() == nil, "the override in force")
			}
		} else {
			assert.Equal(t, in, g.in, "one policy in force for the whole case")
		}
		last = now
		admitted += g.admitted
	}
	allow := allowance(bound, first, last)
	assert.LessOrEqual(t, admitted, allow, "admitted %d, more than the %s allows (%d) from %v to %v (in force: %s)",
		admitted, limits.DefaultName(bound.Algorithm, bound.Limit, bound.Window, bound.Burst), allow, first, last, limits.DefaultName(in.Algorithm, in.Limit, in.Window, in.Burst))
	if unfit && !c.used && src.Logs != nil {
		assert.Contains(t, src.Logs(), "cannot apply", "an override that cannot apply is logged")
	}
}

// noLooser asserts that in, a policy in force, is valid and, where the
// literal policy lit is valid (and exact is set), lit itself, and
// otherwise no looser: its limit and capacity no greater (the window and
// algorithm are lit's).
func noLooser(t *testing.T, in, lit core.Policy, exact bool, what string) {
	t.Helper()
	require.NoError(t, in.Validate(), "%s: the policy in force is valid", what)
	if exact && lit.Validate() == nil {
		assert.Equal(t, lit, in, "%s: a valid policy as written is applied as written", what)
		return
	}
	assert.Equal(t, lit.Window, in.Window, what)
	assert.LessOrEqual(t, in.Limit, lit.Limit, "%s: the limit is no looser than written", what)
	assert.LessOrEqual(t, limits.Capacity(in.Algorithm, in.Limit, in.Burst), limits.Capacity(lit.Algorithm, lit.Limit, lit.Burst), "%s: nor the capacity", what)
}

// got is what greedy saw.
type got struct {
	admitted int64
	in       core.Policy // the policy the decisions were made by
}

// greedy takes all it can for key at now: requests of cost c, from the
// largest cost down, halving, each while admitted (at most 3 times), down
// to a thousandth of the capacity in force (or 1). Every decision must
// come without an error.
func greedy(t *testing.T, l *core.Limiter, key string, now time.Time, top int64) got {
	t.Helper()
	ctx := context.Background()
	var g got
	d, err := l.AllowN(ctx, key, 1, now)
	require.NoError(t, err, "a decision fails")
	require.NoError(t, d.Err, "a decision fails: decided by the FailClosed, not the store")
	require.Equal(t, core.SourceStore, d.Source, "decided by the store")
	g.in = d.Policy
	if d.Allowed {
		g.admitted++
	}
	capacity := limits.Capacity(d.Policy.Algorithm, d.Policy.Limit, d.Policy.Burst)
	floor := max(1, capacity>>10)
	for c := min(top, capacity); c >= floor; c /= 2 {
		for range 3 {
			d, err := l.AllowN(ctx, key, c, now)
			if errors.Is(err, core.ErrInvalidOption) {
				break // above every policy configured for the request
			}
			require.NoError(t, err, "a decision of cost %d fails", c)
			require.NoError(t, d.Err, "a decision of cost %d fails", c)
			require.Equal(t, core.SourceStore, d.Source)
			require.Equal(t, g.in, d.Policy)
			if !d.Allowed {
				break
			}
			g.admitted += c
		}
	}
	return g
}

// literal is p as o, then a load of scale s, change it, as written:
// nothing clamped, a burst kept whatever it takes to fill, a scaled value
// rounded down to no less than 1 (a limit is a whole number; 0 is none).
// It may be an invalid policy.
func literal(p core.Policy, o overrides.Override, s float64) core.Policy {
	scale := func(n int64, f float64) int64 {
		return max(1, int64(math.Floor(float64(n)*f*(1+1e-12))))
	}
	if o.Limit > 0 {
		p.Limit = o.Limit
	}
	if o.Burst > 0 && limits.IsBucket(p.Algorithm) {
		p.Burst = o.Burst
	}
	for _, f := range []float64{o.Scale, s} {
		if f > 0 && f != 1 {
			p.Limit = scale(p.Limit, f)
			if p.Burst > 0 {
				p.Burst = scale(p.Burst, f)
			}
		}
	}
	return p
}

// ownValuesUnfit reports whether o's own values, as set (before its
// Scale), make no valid policy of p: a limit above limits.MaxLogLimit on a
// sliding log, a bucket's burst its rate cannot refill within
// limits.MaxWindow.
func ownValuesUnfit(p core.Policy, o overrides.Override) bool {
	if o.Limit > 0 {
		p.Limit = o.Limit
		if p.Algorithm == core.SlidingWindowLog && p.Limit > limits.MaxLogLimit {
			return true
		}
	}
	if o.Burst > 0 && limits.IsBucket(p.Algorithm) {
		p.Burst = o.Burst
		return p.Validate() != nil
	}
	return false
}

// allowance is the most cost p admits, from any state, to requests made
// from first to last: per window algorithm, the limit in each window the
// requests touch (aligned to the epoch for the fixed window and the
// counter, whose current window alone is bounded by the limit; any
// window-long stretch for the log); for the buckets, the capacity plus
// what the rate refills in between.
func allowance(p core.Policy, first, last time.Time) int64 {
	w := p.Window.Microseconds()
	a, b := first.UnixMicro(), last.UnixMicro()
	var windows int64
	switch p.Algorithm {
	case core.FixedWindow, core.SlidingWindowCounter:
		windows = b/w - a/w + 1
	case core.SlidingWindowLog:
		windows = (b-a)/w + 1
	default:
		refill := new(big.Int).Mul(big.NewInt(p.Limit), big.NewInt(b-a))
		refill.Quo(refill, big.NewInt(w))
		refill.Add(refill, big.NewInt(limits.Capacity(p.Algorithm, p.Limit, p.Burst)))
		if !refill.IsInt64() {
			return math.MaxInt64
		}
		return refill.Int64()
	}
	all := new(big.Int).Mul(big.NewInt(p.Limit), big.NewInt(windows))
	if !all.IsInt64() {
		return math.MaxInt64
	}
	return all.Int64()
}
