package overrides_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/overrides"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// verdict is a layered call's outcome: the binding decision, and every
// layer's.
type verdict struct {
	core.Decision
	Decisions []core.Decision
}

// adjust is src.Adjust of p for a client, which must not fail.
func adjust(t *testing.T, src core.PolicySource, p core.Policy) core.Policy {
	t.Helper()
	q, err := src.Adjust(context.Background(), "c", p)
	require.NoError(t, err)
	return q
}

func newStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestParseAndString(t *testing.T) {
	for text, want := range map[string]overrides.Override{
		"limit=500":               {Limit: 500},
		"scale=0.5":               {Scale: 0.5},
		"limit=500 burst=50":      {Limit: 500, Burst: 50},
		"limit=500, burst=50":     {Limit: 500, Burst: 50},
		" LIMIT=7\tscale=2 ":      {Limit: 7, Scale: 2},
		"burst=9":                 {Burst: 9},
		"limit=1 burst=2 scale=3": {Limit: 1, Burst: 2, Scale: 3},
	} {
		got, err := overrides.Parse(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, got, text)
		again, err := overrides.Parse(got.String())
		require.NoError(t, err, got.String())
		assert.Equal(t, got, again, "String and Parse agree")
	}
	for _, text := range []string{
		"", "   ", "limit", "limit=", "limit=0", "limit=-5", "limit=1.5", "limit=abc",
		"limit=9223372036854775807", "limit=99999999999999999999", "scale=0", "scale=-1", "scale=NaN",
		"scale=Inf", "scale=1e9", "rate=5", "limit=5 limit=6", "limit=5 =6",
		strings.Repeat("limit=5 ", 40), "limit=5\x00",
	} {
		_, err := overrides.Parse(text)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "%q", text)
	}
}

func TestApply(t *testing.T) {
	bucket := core.Policy{Name: "b", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20}
	window := core.Policy{Name: "w", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	assert.Equal(t, int64(50), overrides.Apply(overrides.Override{Limit: 50}, window).Limit)
	assert.Equal(t, int64(0), overrides.Apply(overrides.Override{Burst: 5}, window).Burst, "a window has no burst")
	b := overrides.Apply(overrides.Override{Scale: 0.5}, bucket)
	assert.Equal(t, int64(50), b.Limit)
	assert.Equal(t, int64(10), b.Burst)
	b = overrides.Apply(overrides.Override{Limit: 10, Burst: 4, Scale: 0.01}, bucket)
	assert.Equal(t, int64(1), b.Limit, "never below 1")
	assert.Equal(t, int64(1), b.Burst)
	huge := overrides.Apply(overrides.Override{Limit: limits.MaxLimit, Scale: overrides.MaxScale}, window)
	assert.Equal(t, int64(limits.MaxLimit), huge.Limit, "never above MaxLimit")
	assert.NoError(t, huge.Validate())

	// Scale rounds down: never looser than it asks.
	assert.Equal(t, int64(1), overrides.Apply(overrides.Override{Limit: 3, Scale: 0.5}, window).Limit, "1.5 is 1, not 2")
	assert.Equal(t, int64(4), overrides.Apply(overrides.Override{Limit: 3, Scale: 1.5}, window).Limit, "4.5 is 4")
	assert.Equal(t, int64(3), overrides.Apply(overrides.Override{Limit: 1000, Scale: 0.003}, window).Limit, "0.003 of 1,000 is 3, float64 error aside")
	assert.Equal(t, int64(29), overrides.Apply(overrides.Override{Limit: 100, Scale: 0.29}, window).Limit, "28.999999999999996 is 29")

	// Derived values are clamped down to valid ones, never up.
	issue := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 100, Window: time.Hour, Burst: 10_000}
	got := overrides.Apply(overrides.Override{Limit: 1}, issue)
	assert.Equal(t, core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour, Burst: 8784}, got,
		"the kept burst, which 1 an hour cannot refill within MaxWindow, clamped to what it refills")
	require.NoError(t, got.Validate())
	edge := core.Policy{Name: "e", Algorithm: core.LeakyBucket, Limit: 3, Window: time.Hour, Burst: 3 * 8784}
	got = overrides.Apply(overrides.Override{Scale: 0.5}, edge)
	assert.Equal(t, int64(1), got.Limit)
	assert.Equal(t, int64(8784), got.Burst, "13,176 at 1 an hour is past MaxWindow: clamped")
	require.NoError(t, got.Validate())
	slowest := core.Policy{Name: "s", Algorithm: core.TokenBucket, Limit: 5, Window: limits.MaxWindow}
	got = overrides.Apply(overrides.Override{Scale: 1e-6}, slowest)
	assert.Equal(t, int64(1), got.Limit, "scaled to 0: 1, the least limit")
	require.NoError(t, got.Validate())
	logPolicy := core.Policy{Name: "l", Algorithm: core.SlidingWindowLog, Limit: 50_000, Window: time.Second}
	got = overrides.Apply(overrides.Override{Scale: 10}, logPolicy)
	assert.Equal(t, int64(limits.MaxLogLimit), got.Limit, "a log scaled past MaxLogLimit: clamped")
	require.NoError(t, got.Validate())

	// Values the override sets itself that no valid policy has: not
	// applied (Apply leaves the policy as it is).
	assert.Equal(t, issue, overrides.Apply(overrides.Override{Limit: 1, Burst: 10_000}, issue))
	assert.Equal(t, logPolicy, overrides.Apply(overrides.Override{Limit: limits.MaxLogLimit + 1}, logPolicy))
}

func TestSetTakesEffectOnTheNextRequest(t *testing.T) {
	live := overrides.New()
	l, err := core.NewLimiter(newStore(t), []core.Policy{
		{Name: "api", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute},
		{Name: "other", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute},
	}, core.WithPolicySource(live))
	require.NoError(t, err)
	ctx := context.Background()
	ask := func(cost int64) verdict {
		v := verdict{Decisions: make([]core.Decision, 2)}
		var err error
		v.Decision, _, err = l.AllowLayers(ctx, t0, []core.Request{{Key: "c", Cost: cost}, {Key: "c", Cost: 1}}, v.Decisions)
		require.NoError(t, err)
		require.NoError(t, v.Err)
		return v
	}
	require.True(t, ask(900).Allowed)

	require.NoError(t, live.Put("api", overrides.Override{Limit: 500}))
	v := ask(1)
	assert.False(t, v.Allowed, "900 used of a limit now 500")
	assert.Equal(t, "api", v.Policy.Name)
	assert.Equal(t, int64(500), v.Limit)
	assert.Equal(t, int64(1000-1), v.Decisions[1].Remaining, "the other layer is not overridden, and the denied request took nothing from it")

	require.NoError(t, live.Put("api", overrides.Override{Limit: 10_000}))
	v = ask(1)
	require.True(t, v.Allowed, "raised: the room at once")
	assert.Equal(t, int64(10_000-901), v.Decisions[0].Remaining)

	live.Delete("api")
	live.Delete("api") // twice: nothing
	v = ask(1)
	require.True(t, v.Allowed)
	assert.Equal(t, int64(1000-902), v.Decisions[0].Remaining)

	require.NoError(t, live.Replace(map[string]overrides.Override{"api": {Scale: 0.5}, "other": {Limit: 3}}))
	v = ask(1)
	assert.False(t, v.Allowed, "902 used of 500; other has 2 used of 3")
	assert.Equal(t, map[string]overrides.Override{"api": {Scale: 0.5}, "other": {Limit: 3}}, live.Snapshot())
	require.NoError(t, live.Replace(nil))
	assert.Empty(t, live.Snapshot())
}

func TestSetRefusesBadEntries(t *testing.T) {
	live := overrides.New()
	for name, tc := range map[string]struct {
		layer string
		o     overrides.Override
	}{
		"empty override": {"api", overrides.Override{}},
		"negative limit": {"api", overrides.Override{Limit: -1}},
		"NaN scale":      {"api", overrides.Override{Scale: math.NaN()}},
		"huge burst":     {"api", overrides.Override{Burst: limits.MaxLimit + 1}},
		"empty layer":    {"", overrides.Override{Limit: 1}},
		"bad layer":      {"a b", overrides.Override{Limit: 1}},
		"long layer":     {strings.Repeat("a", limits.MaxNameLen+1), overrides.Override{Limit: 1}},
	} {
		assert.ErrorIs(t, live.Put(tc.layer, tc.o), core.ErrInvalidOption, name)
		assert.ErrorIs(t, live.Replace(map[string]overrides.Override{"ok": {Limit: 1}, tc.layer: tc.o}), core.ErrInvalidOption, name)
	}
	assert.Empty(t, live.Snapshot(), "a refused Replace changes nothing")
}

// captured returns a Set that logs to a buffer, and the buffer.
func captured() (*overrides.Set, *syncbuf.Buffer) {
	live := overrides.New()
	logs := new(syncbuf.Buffer)
	live.SetLogger(slog.New(slog.NewTextHandler(logs, nil)))
	return live, logs
}

// TestOverrideThatCannotApplyKeepsTheLastGoodPolicy: an override whose
// own values make no valid policy of the layer's (a burst of a trillion
// at 1 an hour) used to send every request to the FailMode, open by
// default: each admitted, with an error. Put before the Set had seen the
// policy, it is kept out of force: the configured policy decides, without
// an error, and the Set logs it once, not at every request. Once the Set
// has seen the policy, Put refuses it.
func TestOverrideThatCannotApplyKeepsTheLastGoodPolicy(t *testing.T) {
	live, logs := captured()
	unfit := overrides.Override{Limit: 1, Burst: limits.MaxLimit}
	require.NoError(t, live.Put("api", unfit), "no policy of api seen yet: nothing to refuse it for")
	policy := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Hour}
	l, err := core.NewLimiter(newStore(t), []core.Policy{policy}, core.WithPolicySource(live))
	require.NoError(t, err)
	ctx := context.Background()
	admitted := 0
	for i := range 100 {
		d, err := l.AllowN(ctx, "c", 1, t0.Add(time.Duration(i)*time.Millisecond))
		require.NoError(t, err)
		require.NoError(t, d.Err, "decided by the last good policy, not the FailClosed")
		require.Equal(t, core.SourceStore, d.Source)
		assert.Equal(t, policy, d.Policy)
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 10, admitted, "the configured policy's 10, not 100 (fail open)")
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "cannot apply"), "logged once, not per request: %s", out)
	assert.Contains(t, out, "layer=api")
	assert.Contains(t, out, `override="limit=1 burst=1000000000000"`)
	assert.Contains(t, out, `kept="none: the policy as it came"`)

	// The Set has seen the policy: the same override is refused where it
	// is written, and so is a limit a sliding log cannot keep.
	err = live.Put("api", unfit)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.ErrorIs(t, err, core.ErrInvalidOption)
	assert.ErrorIs(t, live.Check("api", unfit), core.ErrInvalidOption, "Check refuses what Put refuses")
	require.NoError(t, live.Check("api", overrides.Override{Limit: 5}))
	// Replace keeps it, as one another writer stored: out of force, the
	// policy decides by the last good override (none here), and Adjust
	// keeps its answer.
	require.NoError(t, live.Put("api", overrides.Override{Limit: 5}))
	require.NoError(t, live.Replace(map[string]overrides.Override{"api": unfit}))
	assert.Equal(t, map[string]overrides.Override{"api": unfit}, live.Snapshot())
	assert.Equal(t, int64(5), adjust(t, live, policy).Limit, "the last good override, limit=5, decides")
	_ = adjust(t, live, core.Policy{Name: "log", Algorithm: core.SlidingWindowLog, Limit: 10, Window: time.Second})
	assert.ErrorIs(t, live.Put("log", overrides.Override{Limit: limits.MaxLogLimit + 1}), core.ErrInvalidOption)
	require.NoError(t, live.Put("log", overrides.Override{Limit: limits.MaxLogLimit}))
	// What the override only carries over is clamped, never refused.
	require.NoError(t, live.Put("api", overrides.Override{Limit: 1}))
	q := adjust(t, live, core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 100, Window: time.Hour, Burst: 10_000})
	assert.Equal(t, int64(8784), q.Burst, "1 an hour refills 8,784 in 366 days")
}

// planKey is the context key of a request's plan, for contextPlans.
type planKey struct{}

// contextPlans is a PolicySource of plans: the policy in the request's
// context, under the layer's name; the layer's when there is none.
type contextPlans struct{}

// Adjust returns the plan in ctx, named p.Name, or p.
func (contextPlans) Adjust(ctx context.Context, _ string, p core.Policy) (core.Policy, error) {
	if plan, ok := ctx.Value(planKey{}).(core.Policy); ok {
		plan.Name = p.Name
		return plan, nil
	}
	return p, nil
}

// TestOverrideUnfitForAPlanKeepsTheLastGoodOverride: a layer whose
// requests bring plans of their own (a PolicySource before the Set,
// reading the plan from the request's context). An override that fits
// the plans the Set has seen, but not a plan it meets later, decides that
// plan by the override in force before it: the last good one.
func TestOverrideUnfitForAPlanKeepsTheLastGoodOverride(t *testing.T) {
	live, logs := captured()
	perMinute := core.Policy{Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute}
	perMinute.Name = "api"
	l, err := core.NewLimiter(newStore(t), []core.Policy{perMinute}, core.WithPolicySource(contextPlans{}), core.WithPolicySource(live))
	require.NoError(t, err)
	ask := func(key string, plan *core.Policy) core.Decision {
		ctx := context.Background()
		if plan != nil {
			ctx = context.WithValue(ctx, planKey{}, *plan)
		}
		d, _, err := l.AllowLayers(ctx, t0, []core.Request{{Key: key, Cost: 1}}, nil)
		require.NoError(t, err)
		require.NoError(t, d.Err)
		return d
	}
	ask("seen", nil) // the Set learns the per-minute policy
	require.NoError(t, live.Put("api", overrides.Override{Limit: 5}))
	// 1 a minute with a burst of 9,000: 150 hours to fill, valid for the
	// policy the Set knows, but not for an hourly plan (375 days).
	require.NoError(t, live.Put("api", overrides.Override{Limit: 1, Burst: 9000}))
	assert.Equal(t, int64(9000), ask("a", nil).Policy.Burst)

	hourly := core.Policy{Algorithm: core.TokenBucket, Limit: 50, Window: time.Hour}
	for range 20 {
		d := ask("b", &hourly)
		assert.Equal(t, int64(5), d.Policy.Limit, "the last good override, limit=5, on the hourly plan")
		assert.Equal(t, time.Hour, d.Policy.Window)
	}
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "cannot apply"), out)
	assert.Contains(t, out, `kept="limit=5"`)
}

func TestSetAdjustAllocatesNothing(t *testing.T) {
	live := overrides.New()
	require.NoError(t, live.Put("api", overrides.Override{Scale: 0.5}))
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	q := core.Policy{Name: "other", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	ctx := context.Background()
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		_, _ = live.Adjust(ctx, "c", p)
		_, _ = live.Adjust(ctx, "c", q)
	}))
}

func TestSetConcurrentChanges(t *testing.T) {
	live := overrides.New()
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	var wg sync.WaitGroup
	var stop atomic.Bool
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				got, err := live.Adjust(context.Background(), "c", p)
				if err != nil {
					t.Errorf("Adjust: %v", err)
					return
				}
				if lim := got.Limit; lim != 100 && lim != 7 && lim != 9 {
					t.Errorf("limit %d: neither the policy's nor an override's", lim)
					return
				}
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		require.NoError(t, live.Put("api", overrides.Override{Limit: int64(7 + 2*(i%2))}))
		if i%3 == 0 {
			live.Delete("api")
		}
	}
	stop.Store(true)
	wg.Wait()
}

func TestLoadShrinksAndRecoversWithHysteresis(t *testing.T) {
	var signal atomic.Uint64 // float64 bits
	set := func(v float64) { signal.Store(math.Float64bits(v)) }
	set(0)
	load, err := overrides.NewLoad(func() float64 { return math.Float64frombits(signal.Load()) },
		overrides.LoadConfig{High: 100, Low: 50, Step: 0.25, MinScale: 0.25, Layers: []string{"api"}})
	require.NoError(t, err)
	l, err := core.NewLimiter(newStore(t), []core.Policy{{Name: "api", Algorithm: core.FixedWindow, Limit: 8, Window: time.Minute}},
		core.WithPolicySource(load))

	require.NoError(t, err)
	ctx := context.Background()
	// admitted counts what one fresh client gets in one window under the
	// scale in force.
	n := 0
	admitted := func() int {
		n++
		key := "c" + string(rune('a'+n))
		got := 0
		for range 20 {
			d, err := l.AllowN(ctx, key, 1, t0)
			require.NoError(t, err)
			if d.Allowed {
				got++
			}
		}
		return got
	}
	require.Equal(t, 8, admitted(), "calm: the whole limit")

	steps := []struct {
		signal float64
		scale  float64
		limit  int
		why    string
	}{
		{150, 0.75, 6, "past High: shrinks a step"},
		{150, 0.5, 4, "still past High: another step"},
		{150, 0.25, 2, "another"},
		{500, 0.25, 2, "at MinScale: no lower"},
		{80, 0.25, 2, "between Low and High: holds"},
		{101, 0.25, 2, "past High again, at the floor"},
		{99, 0.25, 2, "flapping around High: holds"},
		{51, 0.25, 2, "above Low: holds"},
		{10, 0.5, 4, "below Low: recovers a step"},
		{70, 0.5, 4, "between: holds"},
		{10, 0.75, 6, "below Low: another step"},
		{10, 1, 8, "whole again"},
		{0, 1, 8, "no higher than 1"},
		{math.NaN(), 1, 8, "a NaN reading changes nothing"},
	}
	for _, s := range steps {
		set(s.signal)
		assert.InDelta(t, s.scale, load.Update(), 1e-9, s.why)
		assert.Equal(t, s.limit, admitted(), s.why)
	}
	// A layer Load does not scale keeps its limit.
	set(1000)
	load.Update()
	other, err := core.NewLimiter(newStore(t), []core.Policy{{Name: "other", Algorithm: core.FixedWindow, Limit: 8, Window: time.Minute}},
		core.WithPolicySource(load))

	require.NoError(t, err)
	d, err := other.AllowN(ctx, "c", 1, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(8), d.Limit)
}

func TestLoadIntervalUpdatesUntilClose(t *testing.T) {
	var reads, inflight atomic.Int64
	inflight.Store(4)
	load, err := overrides.NewLoad(func() float64 { reads.Add(1); return float64(inflight.Load()) },
		overrides.LoadConfig{High: 3, Low: 1, Interval: time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return load.Scale() <= 0.5 }, testwait.D(5*time.Second), time.Millisecond,
		"4 in flight, above High: the ticker shrank the limits")
	require.NoError(t, load.Close()) // joins the ticker's goroutine
	require.NoError(t, load.Close())
	after := reads.Load()
	load.Update()
	assert.Equal(t, after+1, reads.Load(), "after Close only an explicit Update reads the signal")
}

func TestNewLoadRefusesBadConfig(t *testing.T) {
	sig := func() float64 { return 0 }
	for name, tc := range map[string]struct {
		signal func() float64
		cfg    overrides.LoadConfig
	}{
		"nil signal":   {nil, overrides.LoadConfig{High: 2, Low: 1}},
		"low = high":   {sig, overrides.LoadConfig{High: 1, Low: 1}},
		"low > high":   {sig, overrides.LoadConfig{High: 1, Low: 2}},
		"NaN":          {sig, overrides.LoadConfig{High: math.NaN(), Low: 1}},
		"inf":          {sig, overrides.LoadConfig{High: math.Inf(1), Low: 1}},
		"step":         {sig, overrides.LoadConfig{High: 2, Low: 1, Step: 2}},
		"min scale":    {sig, overrides.LoadConfig{High: 2, Low: 1, MinScale: -1}},
		"min scale >1": {sig, overrides.LoadConfig{High: 2, Low: 1, MinScale: 1.5}},
		"interval":     {sig, overrides.LoadConfig{High: 2, Low: 1, Interval: time.Microsecond}},
		"negative":     {sig, overrides.LoadConfig{High: 2, Low: 1, Interval: -time.Second}},
	} {
		_, err := overrides.NewLoad(tc.signal, tc.cfg)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
}

func BenchmarkSetAdjust(b *testing.B) {
	live := overrides.New()
	for _, name := range []string{"api", "login", "search"} {
		require.NoError(b, live.Put(name, overrides.Override{Scale: 0.5}))
	}
	p := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = live.Adjust(ctx, "c", p)
	}
}
