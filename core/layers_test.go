package core_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

var layerT0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func fourLayers() []core.Policy {
	return []core.Policy{
		{Name: "global", Algorithm: core.SlidingWindowCounter, Limit: 1_000_000, Window: time.Minute},
		{Name: "user", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Minute},
		{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute},
		{Name: "ip", Algorithm: core.FixedWindow, Limit: 300, Window: time.Minute},
	}
}

func TestNewLayeredRefusesBadConfiguration(t *testing.T) {
	s := newMemStore(t)
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
	many := make([]core.Policy, limits.MaxLayers+1)
	for i := range many {
		many[i] = limitertest.Named(p, "l"+string(rune('a'+i)))
	}
	for name, tc := range map[string]struct {
		store  core.Store
		layers []core.Policy
		opts   []core.Option
		want   error
	}{
		"no layer":           {s, nil, nil, core.ErrInvalidOption},
		"too many":           {s, many, nil, core.ErrInvalidOption},
		"same derived name":  {s, []core.Policy{p, p}, nil, core.ErrInvalidOption},
		"bad name":           {s, []core.Policy{limitertest.Named(p, "a b")}, nil, core.ErrInvalidOption},
		"duplicate":          {s, []core.Policy{limitertest.Named(p, "a"), limitertest.Named(p, "a")}, nil, core.ErrInvalidOption},
		"duplicate but case": {s, []core.Policy{limitertest.Named(p, "login"), limitertest.Named(p, "Login")}, nil, core.ErrInvalidOption},
		"invalid policy":     {s, []core.Policy{{Name: "a", Algorithm: core.FixedWindow, Window: time.Second}}, nil, core.ErrInvalidOption},
		"nil store":          {nil, []core.Policy{limitertest.Named(p, "a")}, nil, core.ErrInvalidOption},
		"deny cache":         {s, []core.Policy{limitertest.Named(p, "a"), limitertest.Named(p, "b")}, []core.Option{core.WithDenyCache(10)}, core.ErrInvalidOption},
		"nil source":         {s, []core.Policy{limitertest.Named(p, "a")}, []core.Option{core.WithPolicySource(nil)}, core.ErrInvalidOption},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := core.NewLimiter(tc.store, tc.layers, tc.opts...)
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, l)
		})
	}
}

func TestAllowLayersRefusesBadRequests(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), fourLayers())
	require.NoError(t, err)
	ctx := context.Background()
	var v limitertest.Verdict
	for name, tc := range map[string]struct {
		reqs []core.Request
		want string
	}{
		"more than the layers": {[]core.Request{{}, {}, {}, {}, {Key: "k", Cost: 1}}, "5 Requests for 4 layers"},
		"no layer checked":     {[]core.Request{{Cost: 1}, {}}, "no layer checked"},
		"nothing":              {nil, "no layer checked"},
		"zero cost":            {[]core.Request{{Key: "k"}}, "cost 0 is not positive"},
		"cost over capacity":   {[]core.Request{{}, {}, {Key: "k", Cost: 6}}, "cost 6, capacity 5"},
		"huge cost":            {[]core.Request{{}, {Key: "k", Cost: math.MaxInt64}}, "capacity 1000"},
		"a later layer's cost": {[]core.Request{{Key: "k", Cost: 1}, {}, {Key: "k", Cost: 6}}, "cost 6, capacity 5"},
	} {
		t.Run(name, func(t *testing.T) {
			err := limitertest.AllowLayers(l, ctx, tc.reqs, layerT0, &v)
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.ErrorContains(t, err, tc.want)
			assert.False(t, v.Allowed)
		})
	}
	_, _, err = l.AllowLayers(ctx, time.Time{}, []core.Request{{Key: "k", Cost: 1}, {Key: "k", Cost: 1}}, make([]core.Decision, 1))
	require.ErrorIs(t, err, core.ErrInvalidOption, "out shorter than reqs")

	// Nothing was taken by the refused requests: the login layer is whole.
	require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{{}, {}, {Key: "k", Cost: 1}}, layerT0, &v))
	assert.True(t, v.Allowed)
	assert.Equal(t, int64(4), v.Remaining)
	assert.Equal(t, 2, v.Binding)
	assert.Zero(t, v.Decisions[0], "a layer not checked")
	assert.Equal(t, "login", v.Decisions[2].Policy.Name)
}

func TestAllowLayersAllOrNothing(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), fourLayers())
	require.NoError(t, err)
	ctx := context.Background()
	login := func(at time.Time) limitertest.Verdict {
		var v limitertest.Verdict
		require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{
			{Key: "api", Cost: 1},
			{Key: "user:7", Cost: 1},
			{Key: "ip:192.0.2.1", Cost: 1},
			{Key: "ip:192.0.2.1", Cost: 1},
		}, at, &v))
		return v
	}
	for i := 1; i <= 5; i++ {
		v := login(layerT0)
		require.True(t, v.Allowed, "login %d", i)
		require.Len(t, v.Decisions, 4)
		// The login layer binds: it has the least left.
		assert.Equal(t, 2, v.Binding)
		assert.Equal(t, "login", v.Policy.Name)
		assert.Equal(t, int64(5-i), v.Remaining)
		assert.Equal(t, int64(1000-i), v.Decisions[1].Remaining)
		assert.Equal(t, int64(300-i), v.Decisions[3].Remaining)
	}
	// Ten denied logins take nothing from the other layers.
	for i := 0; i < 10; i++ {
		v := login(layerT0)
		require.False(t, v.Allowed)
		assert.Equal(t, 2, v.Binding)
		assert.Equal(t, "login", v.Policy.Name)
		assert.Equal(t, int64(0), v.Remaining)
		assert.Equal(t, 15*time.Minute, v.RetryAfter)
		assert.True(t, v.Decisions[1].Allowed)
		assert.Equal(t, int64(995), v.Decisions[1].Remaining, "the user layer says what it has, not what it would have")
		assert.Equal(t, int64(295), v.Decisions[3].Remaining)
		assert.Zero(t, v.Decisions[1].RetryAfter)
	}
	// The other layers' states were not charged: a request outside /login
	// finds them as the five logins left them.
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{
		{},
		{Key: "user:7", Cost: 1},
		{},
		{Key: "ip:192.0.2.1", Cost: 1},
	}, layerT0, &v))
	require.True(t, v.Allowed)
	assert.Equal(t, int64(994), v.Decisions[1].Remaining)
	assert.Equal(t, int64(294), v.Decisions[3].Remaining)
	assert.Zero(t, v.Decisions[0], "not checked")
	assert.Zero(t, v.Decisions[2], "not checked")
	assert.Equal(t, 3, v.Binding, "the ip layer has the least left")
	assert.Equal(t, int64(294), v.Remaining)
}

func TestAllowLayersRetryAfterIsWhenEveryLayerAdmits(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "short", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second},
		{Name: "long", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute},
	})
	require.NoError(t, err)
	ctx := context.Background()
	both := []core.Request{{Key: "k", Cost: 1}, {Key: "k", Cost: 1}}
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l, ctx, both, layerT0, &v))
	require.True(t, v.Allowed)
	require.NoError(t, limitertest.AllowLayers(l, ctx, both, layerT0.Add(time.Second), &v))
	require.True(t, v.Allowed)
	// Both layers deny now: the short one for a second, the long one
	// until its minute ends. Retry-After is the later.
	at := layerT0.Add(1500 * time.Millisecond)
	require.NoError(t, limitertest.AllowLayers(l, ctx, both, at, &v))
	require.False(t, v.Allowed)
	assert.Equal(t, 1, v.Binding)
	assert.Equal(t, time.Minute-1500*time.Millisecond, v.RetryAfter)
	assert.False(t, v.Decisions[0].Allowed)
	assert.False(t, v.Decisions[1].Allowed)
	// One millisecond before it, still denied; at it, admitted.
	require.NoError(t, limitertest.AllowLayers(l, ctx, both, at.Add(v.RetryAfter-time.Millisecond), &v))
	assert.False(t, v.Allowed)
	require.NoError(t, limitertest.AllowLayers(l, ctx, both, layerT0.Add(time.Minute), &v))
	assert.True(t, v.Allowed)
}

func TestAllowLayersLeakyDelayIsTheLongest(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "fast", Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 5},
		{Name: "slow", Algorithm: core.LeakyBucket, Limit: 2, Window: time.Second, Burst: 5},
	})
	require.NoError(t, err)
	var v limitertest.Verdict
	checks := []core.Request{{Key: "k", Cost: 1}, {Key: "k", Cost: 1}}
	require.NoError(t, limitertest.AllowLayers(l, context.Background(), checks, layerT0, &v))
	require.NoError(t, limitertest.AllowLayers(l, context.Background(), checks, layerT0, &v))
	require.True(t, v.Allowed)
	assert.Equal(t, 100*time.Millisecond, v.Decisions[0].Delay)
	assert.Equal(t, 500*time.Millisecond, v.Decisions[1].Delay)
	assert.Equal(t, 500*time.Millisecond, v.Delay)
}

// planKey is the context key under which the tests' authentication puts
// the client's plan: the policy its requests are decided by.
type planKey struct{}

// contextPlans is the PolicySource of a plan read from the request's
// context.
type contextPlans struct{}

// Adjust returns the plan in ctx, p when there is none.
func (contextPlans) Adjust(ctx context.Context, _ string, p core.Policy) (core.Policy, error) {
	if plan, ok := ctx.Value(planKey{}).(core.Policy); ok {
		return plan, nil
	}
	return p, nil
}

func TestAllowLayersPerRequestPolicy(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "user", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute},
	}, core.WithPolicySource(contextPlans{}))
	require.NoError(t, err)
	ask := func(p *core.Policy, cost int64) (limitertest.Verdict, error) {
		ctx := context.Background()
		if p != nil {
			ctx = context.WithValue(ctx, planKey{}, *p)
		}
		var v limitertest.Verdict
		err := limitertest.AllowLayers(l, ctx, []core.Request{{Key: "user:1", Cost: cost}}, layerT0, &v)
		return v, err
	}
	// 900 of the free plan's 1,000.
	v, err := ask(nil, 900)
	require.NoError(t, err)
	require.True(t, v.Allowed)
	small := &core.Policy{Name: "user", Algorithm: core.FixedWindow, Limit: 500, Window: time.Minute}
	v, err = ask(small, 1)
	require.NoError(t, err)
	assert.False(t, v.Allowed, "moved to 500, a client that used 900 is denied")
	assert.Equal(t, "user", v.Policy.Name)
	assert.Equal(t, int64(500), v.Limit)
	big := &core.Policy{Name: "user", Algorithm: core.FixedWindow, Limit: 10_000, Window: time.Minute}
	v, err = ask(big, 1)
	require.NoError(t, err)
	require.True(t, v.Allowed, "moved to 10,000, it gets the room at once")
	assert.Equal(t, int64(10_000-901), v.Remaining)
	v, err = ask(big, 5000)
	require.NoError(t, err, "a cost within the plan, above the layer's own 1,000, is the plan's to decide")
	require.True(t, v.Allowed)

	// A plan of another name or algorithm, or an invalid one, is decided
	// by the fail mode (open here), with Decision.Err saying why.
	for name, p := range map[string]*core.Policy{
		"other name":      {Name: "gold", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute},
		"other algorithm": {Name: "user", Algorithm: core.TokenBucket, Limit: 10, Window: time.Minute},
		"invalid":         {Name: "user", Algorithm: core.FixedWindow, Limit: -1, Window: time.Minute},
	} {
		v, err := ask(p, 1)
		require.NoError(t, err, name)
		require.ErrorIs(t, v.Err, limits.ErrPolicy, name)
		assert.True(t, v.Allowed, name)
		assert.Equal(t, core.SourceFailMode, v.Source, name)
	}
	closed, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "user", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Minute, FailClosed: time.Second},
	}, core.WithPolicySource(contextPlans{}))
	require.NoError(t, err)
	var cv limitertest.Verdict
	ctx := context.WithValue(context.Background(), planKey{}, core.Policy{Name: "user", Algorithm: core.FixedWindow, Window: time.Minute})
	err = limitertest.AllowLayers(closed, ctx, []core.Request{{Key: "k", Cost: 1}}, layerT0, &cv)
	require.NoError(t, err)
	require.ErrorIs(t, cv.Err, limits.ErrPolicy)
	assert.False(t, cv.Allowed)
	assert.Equal(t, core.SourceFailMode, cv.Source)
	assert.Equal(t, time.Second, cv.RetryAfter)
	d, err := closed.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "AllowN consults the source alike")
	assert.Equal(t, core.SourceFailMode, d.Source)
}

// scale is a PolicySource that multiplies every Limit by an atomic-ish
// factor, set between decisions.
type scale struct {
	mu     sync.Mutex
	factor float64
	name   string // when set, renames the policy (invalid)
}

func (s *scale) Adjust(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.factor != 0 {
		p.Limit = int64(float64(p.Limit) * s.factor)
	}
	if s.name != "" {
		p.Name = s.name
	}
	return p, nil
}

func (s *scale) set(f float64, name string) {
	s.mu.Lock()
	s.factor, s.name = f, name
	s.mu.Unlock()
}

func TestPolicySourceTakesEffectOnTheNextRequest(t *testing.T) {
	ctx := context.Background()
	src := &scale{}
	single, err := core.NewLimiter(newMemStore(t), []core.Policy{{Name: "api", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute}},
		core.WithPolicySource(src))

	require.NoError(t, err)
	layered, err := core.NewLimiter(newMemStore(t), []core.Policy{{Name: "api", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute}},
		core.WithPolicySource(src))
	require.NoError(t, err)
	for name, l := range map[string]*core.Limiter{"single": single, "layered": layered} {
		t.Run(name, func(t *testing.T) {
			src.set(0, "")
			d, err := l.AllowN(ctx, "k", 6, layerT0)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.Equal(t, int64(4), d.Remaining)

			src.set(0.5, "") // an incident: half the limit
			d, err = l.AllowN(ctx, "k", 1, layerT0)
			require.NoError(t, err)
			assert.False(t, d.Allowed, "6 used of a limit now 5")
			assert.Equal(t, int64(5), d.Limit)

			src.set(2, "")
			d, err = l.AllowN(ctx, "k", 1, layerT0)
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			assert.Equal(t, int64(13), d.Remaining)

			src.set(0, "renamed") // a source that breaks the contract: the FailMode decides
			d, err = l.AllowN(ctx, "k", 1, layerT0)
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, limits.ErrPolicy)
			assert.True(t, d.Allowed)
			assert.Equal(t, core.SourceFailMode, d.Source)

			src.set(-1, "") // a negative limit: invalid, the FailMode decides
			d, err = l.AllowN(ctx, "k", 1, layerT0)
			require.NoError(t, err)
			require.ErrorIs(t, d.Err, limits.ErrPolicy)
			assert.Equal(t, core.SourceFailMode, d.Source)
		})
	}
}

func TestLayeredAllowAndResetApplyToEveryLayer(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "a", Algorithm: core.FixedWindow, Limit: 3, Window: time.Minute},
		{Name: "b", Algorithm: core.FixedWindow, Limit: 2, Window: time.Minute},
	})
	require.NoError(t, err)
	ctx := context.Background()
	assert.Equal(t, "a", l.Policies()[0].Name)
	require.Len(t, l.Policies(), 2)
	assert.Equal(t, "b", l.Policies()[1].Name)

	for i := 0; i < 2; i++ {
		d, err := l.AllowN(ctx, "k", 1, layerT0)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := l.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "b", d.Policy.Name)

	require.NoError(t, l.Reset(ctx, "k", "b"))
	d, err = l.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	require.True(t, d.Allowed, "b was reset; a had one left")
	d, err = l.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "a", d.Policy.Name)

	require.NoError(t, l.Reset(ctx, "k"))
	d, err = l.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	require.ErrorIs(t, l.Reset(ctx, "k", "nope"), core.ErrInvalidOption)
}

func TestSingleLimiterAsOneLayer(t *testing.T) {
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}})
	require.NoError(t, err)
	require.Len(t, l.Policies(), 1)
	ctx := context.Background()
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{{Key: "k", Cost: 1}}, layerT0, &v))
	assert.True(t, v.Allowed)
	assert.Equal(t, 0, v.Binding)
	require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{{Key: "k", Cost: 1}}, layerT0, &v))
	assert.False(t, v.Allowed)
	require.ErrorIs(t, limitertest.AllowLayers(l, ctx, []core.Request{{}, {Key: "k", Cost: 1}}, layerT0, &v), core.ErrInvalidOption)
	require.NoError(t, l.Reset(ctx, "k", "p"))
	require.NoError(t, limitertest.AllowLayers(l, ctx, []core.Request{{Key: "k", Cost: 1}}, layerT0, &v))
	assert.True(t, v.Allowed)
}

func TestLayeredShadowAndObservers(t *testing.T) {
	var mu sync.Mutex
	var events []core.Event
	obs := limitertest.Observer(func(e core.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	l, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "a", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute},
		{Name: "b", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute},
	}, core.WithShadow(), core.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()
	checks := []core.Request{{Key: "x", Cost: 1}, {Key: "y", Cost: 1}}
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks, layerT0, &v))
	require.True(t, v.Allowed)
	require.False(t, v.Shadowed)
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks, layerT0, &v))
	assert.True(t, v.Allowed)
	assert.True(t, v.Shadowed, "b would have denied")
	mu.Lock()
	all := append([]core.Event(nil), events...)
	mu.Unlock()
	require.Len(t, all, 4, "one event a layer that applied")
	var seen []core.Event
	for _, e := range all {
		if e.Binding {
			seen = append(seen, e)
			continue
		}
		assert.Equal(t, "a", e.Policy.Name, "a never binds")
		assert.Equal(t, "x", e.Key)
		assert.Equal(t, outcome.Allowed, outcome.Of(&e.Decision), "a would admit both")
	}
	require.Len(t, seen, 2, "one binding event a request")
	assert.Equal(t, outcome.Allowed, outcome.Of(&seen[0].Decision))
	assert.Equal(t, "b", seen[0].Policy.Name, "b binds: it has the least left")
	assert.Equal(t, "y", seen[0].Key)
	assert.Equal(t, outcome.ShadowDenied, outcome.Of(&seen[1].Decision))
	assert.Equal(t, "b", seen[1].Policy.Name)
	// In shadow mode the denied request took nothing from a.
	require.NoError(t, limitertest.AllowLayers(l, ctx, checks[:1], layerT0, &v))
	assert.Equal(t, int64(3), v.Remaining)
}

func TestLayeredConcurrentExactness(t *testing.T) {
	// Several Limiters over one store, many goroutines: per layer, what
	// was admitted never exceeds its limit, and a layer with room counts
	// exactly the admitted requests (denied ones took nothing).
	s := newMemStore(t)
	layers := []core.Policy{
		{Name: "wide", Algorithm: core.FixedWindow, Limit: 1_000_000, Window: time.Minute},
		{Name: "user", Algorithm: core.SlidingWindowLog, Limit: 40, Window: time.Minute},
		{Name: "ip", Algorithm: core.TokenBucket, Limit: 25, Window: time.Hour},
	}
	var limiters []*core.Limiter
	for i := 0; i < 3; i++ {
		l, err := core.NewLimiter(s, layers)
		require.NoError(t, err)
		limiters = append(limiters, l)
	}
	ctx := context.Background()
	var admitted sync.Map // user key -> count
	var wg sync.WaitGroup
	var total int64
	var mu sync.Mutex
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			l := limiters[g%len(limiters)]
			user := "u" + string(rune('0'+g%4))
			ip := "ip" + string(rune('0'+g%3))
			var v limitertest.Verdict
			for i := 0; i < 60; i++ {
				err := limitertest.AllowLayers(l, ctx, []core.Request{
					{Key: "all", Cost: 1},
					{Key: user, Cost: 1},
					{Key: ip, Cost: 1},
				}, layerT0, &v)
				if !assert.NoError(t, err) {
					return
				}
				if v.Allowed {
					n, _ := admitted.LoadOrStore(user+"/"+ip, new(int64))
					mu.Lock()
					*n.(*int64)++
					total++
					mu.Unlock()
				}
			}
		}(g)
	}
	wg.Wait()
	perUser := map[string]int64{}
	perIP := map[string]int64{}
	admitted.Range(func(k, v any) bool {
		var user, ip string
		for i := 0; i < len(k.(string)); i++ {
			if k.(string)[i] == '/' {
				user, ip = k.(string)[:i], k.(string)[i+1:]
			}
		}
		perUser[user] += *v.(*int64)
		perIP[ip] += *v.(*int64)
		return true
	})
	for u, n := range perUser {
		assert.LessOrEqual(t, n, int64(40), u)
	}
	for ip, n := range perIP {
		assert.LessOrEqual(t, n, int64(25), ip)
	}
	assert.Equal(t, int64(75), total, "3 addresses of 25 each bind before the users' 4*40")
	var v limitertest.Verdict
	require.NoError(t, limitertest.AllowLayers(limiters[1], ctx, []core.Request{{Key: "all", Cost: 1}}, layerT0, &v))
	assert.Equal(t, int64(1_000_000-total-1), v.Remaining, "the wide layer counted the admitted requests only")
}

func TestLayeredCallerCanceled(t *testing.T) {
	// The caller's cancellation is ErrCanceled: no FailMode applies.
	l, err := core.NewLimiter(newMemStore(t), fourLayers())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var v limitertest.Verdict
	err = limitertest.AllowLayers(l, ctx, []core.Request{{Key: "k", Cost: 1}}, layerT0, &v)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, v.Allowed)
	assert.True(t, errors.Is(err, context.Canceled))
}

func TestLayeredAllowAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops arrays on purpose")
	}
	// Allow on a layered Limiter over memstore hands the store arrays of
	// requests and decisions from pools: no allocation per decision, on
	// admissions and on denials alike.
	layers := fourLayers()
	layers[2].Limit = limits.MaxLogLimit
	l, err := core.NewLimiter(newMemStore(t), layers)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.AllowN(ctx, "203.0.113.7", 1, layerT0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	var i int
	allocs := testing.AllocsPerRun(200, func() {
		i++
		d, err := l.AllowN(ctx, "203.0.113.7", 1, layerT0.Add(time.Duration(i)*time.Millisecond))
		if err != nil || !d.Allowed {
			t.Fatalf("AllowAt: %+v, %v", d, err)
		}
	})
	// (The sliding log's array grows now and then as it logs: amortized,
	// a small fraction of an allocation per call, which AllocsPerRun's
	// integer average rounds away.)
	assert.Zero(t, allocs, "allocations per admitted layered Allow")

	full, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "room", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Minute},
		{Name: "full", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour},
	})
	require.NoError(t, err)
	d, err = full.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	allocs = testing.AllocsPerRun(200, func() {
		d, err := full.AllowN(ctx, "k", 1, layerT0)
		if err != nil || d.Allowed {
			t.Fatalf("AllowAt: %+v, %v", d, err)
		}
	})
	assert.Zero(t, allocs, "allocations per denied layered Allow")

	// With a fallback, which every admission is mirrored in.
	mirrored, err := core.NewLimiter(newMemStore(t), []core.Policy{
		{Name: "a", Algorithm: core.TokenBucket, Limit: 1_000_000, Window: time.Second},
		{Name: "b", Algorithm: core.FixedWindow, Limit: 1_000_000, Window: time.Hour},
	}, core.WithFallback(newMemStore(t)))
	require.NoError(t, err)
	d, err = mirrored.AllowN(ctx, "k", 1, layerT0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	allocs = testing.AllocsPerRun(200, func() {
		d, err := mirrored.AllowN(ctx, "k", 1, layerT0)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowAt: %+v, %v", d, err)
		}
	})
	assert.Zero(t, allocs, "allocations per layered Allow mirrored in a fallback")
}
