package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// settleFlow returns a flow of layers over a memstore deciding at t0, and
// the errors its ErrorHandler heard.
func settleFlow(t *testing.T, store core.Store, layers []httplimit.Layer, opts ...httplimit.Option) (*httplimit.Flow, *[]error) {
	t.Helper()
	var mu sync.Mutex
	errs := &[]error{}
	f, err := httplimit.New(clockstore.At(store, t0), layers, append([]httplimit.Option{httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) {
		mu.Lock()
		*errs = append(*errs, err)
		mu.Unlock()
	})}, opts...)...)
	require.NoError(t, err)
	return f, errs
}

// used is what layer has counted of the test request's client.
func used(t *testing.T, f *httplimit.Flow, layer int) int64 {
	t.Helper()
	reqs := make([]core.Request, layer+1)
	reqs[layer].Key = "ip:192.0.2.1"
	out := make([]core.Decision, layer+1)
	require.NoError(t, f.Limiter().Peek(context.Background(), time.Time{}, reqs, out))
	return out[layer].Limit - out[layer].Remaining
}

// answer returns a next for Serve that answers status, after do.
func answer(status int, do func(ctx context.Context)) func(ctx context.Context) int {
	return func(ctx context.Context) int {
		if do != nil {
			do(ctx)
		}
		return status
	}
}

func TestNewRejectsBadSettling(t *testing.T) {
	p := core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}
	reserve := func(keyfuncs.Request) int64 { return 10 }
	for name, layers := range map[string][]httplimit.Layer{
		"unknown Counts":              {{Policy: p, Counts: 9}},
		"IsFailure counting all":      {{Policy: p, IsFailure: func(int) bool { return true }}},
		"IsFailure counting reported": {{Policy: p, Counts: httplimit.CountReported, Cost: reserve, IsFailure: func(int) bool { return true }}},
		"reported without a reserve":  {{Policy: p, Counts: httplimit.CountReported}},
		"successes without a name":    {{Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}, Counts: httplimit.CountSuccesses}},
		"a companion's name taken": {{Policy: p, Counts: httplimit.CountSuccesses},
			{Policy: core.Policy{Name: "login.failures", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute}}},
	} {
		_, err := httplimit.New(memStore(t), layers)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
	f, err := httplimit.New(memStore(t), []httplimit.Layer{{Policy: p, Counts: httplimit.CountSuccesses}})
	require.NoError(t, err)
	names := []string{}
	for _, q := range f.Limiter().Policies() {
		names = append(names, q.Name)
	}
	assert.Equal(t, []string{"login", "login.failures"}, names, "the companion")
}

// TestServeSettles: failures and successes by status, by IsFailure and by
// Report; costs by ReportCost; what a panic and a refused request leave
// counted.
func TestServeSettles(t *testing.T) {
	p := core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 1000, Window: time.Hour}
	t.Run("failures", func(t *testing.T) {
		f, errs := settleFlow(t, memStore(t), []httplimit.Layer{{Policy: p, Counts: httplimit.CountFailures}})
		for _, c := range []struct {
			status int
			report func(context.Context)
			counts int64
		}{
			{200, nil, 0}, {401, nil, 1}, {404, nil, 1}, {500, nil, 1}, {302, nil, 0},
			{200, func(ctx context.Context) { httplimit.Report(ctx, true) }, 1},
			{401, func(ctx context.Context) { httplimit.Report(ctx, false) }, 0},
			{401, func(ctx context.Context) { httplimit.Report(ctx, false); httplimit.Report(ctx, true) }, 1},
		} {
			before := used(t, f, 0)
			require.True(t, f.Serve(newRequest(), newResponse(), answer(c.status, c.report)))
			assert.Equal(t, c.counts, used(t, f, 0)-before, "status %d", c.status)
		}
		assert.Empty(t, *errs)

		before := used(t, f, 0)
		assert.Panics(t, func() {
			f.Serve(newRequest(), newResponse(), func(context.Context) int { panic("handler") })
		}, "a handler's panic goes on")
		assert.Equal(t, int64(1), used(t, f, 0)-before, "a handler that panicked failed")

		before = used(t, f, 0)
		require.True(t, handle(f, newRequest(), newResponse()))
		assert.Equal(t, int64(0), used(t, f, 0)-before, "a next that cannot tell the status (0) answered 200")
	})

	t.Run("is-failure", func(t *testing.T) {
		only5xx := func(status int) bool { return status >= 500 }
		f, _ := settleFlow(t, memStore(t), []httplimit.Layer{{Policy: p, Counts: httplimit.CountFailures, IsFailure: only5xx}})
		for _, status := range []int{200, 401, 404, 429, 503, 500} {
			require.True(t, f.Serve(newRequest(), newResponse(), answer(status, nil)))
		}
		assert.Equal(t, int64(2), used(t, f, 0), "only the 5xx fail")
		panicky := func(int) bool { panic("predicate") }
		g, errs := settleFlow(t, memStore(t), []httplimit.Layer{{Policy: p, Counts: httplimit.CountFailures, IsFailure: panicky}})
		require.True(t, g.Serve(newRequest(), newResponse(), answer(200, nil)))
		assert.Equal(t, int64(1), used(t, g, 0), "an outcome that cannot be told stays counted")
		require.Len(t, *errs, 1)
		assert.ErrorContains(t, (*errs)[0], "IsFailure panicked")
	})

	t.Run("successes", func(t *testing.T) {
		f, _ := settleFlow(t, memStore(t), []httplimit.Layer{{Policy: p, Counts: httplimit.CountSuccesses}})
		for _, status := range []int{200, 201, 401, 500, 204} {
			require.True(t, f.Serve(newRequest(), newResponse(), answer(status, nil)))
		}
		assert.Equal(t, int64(3), used(t, f, 0), "successes")
		assert.Equal(t, int64(2), used(t, f, 1), "failures, in the companion")
	})

	t.Run("reported", func(t *testing.T) {
		reserve := func(keyfuncs.Request) int64 { return 50 }
		ly := httplimit.Layer{Policy: p, Counts: httplimit.CountReported, Cost: reserve}
		f, errs := settleFlow(t, memStore(t), []httplimit.Layer{ly})
		serve := func(do func(context.Context)) int64 {
			t.Helper()
			before := used(t, f, 0)
			require.True(t, f.Serve(newRequest(), newResponse(), answer(200, do)))
			return used(t, f, 0) - before
		}
		report := func(n int64) func(context.Context) {
			return func(ctx context.Context) { httplimit.ReportCost(ctx, n) }
		}
		assert.Equal(t, int64(7), serve(report(7)))
		assert.Equal(t, int64(0), serve(report(0)), "a cost of nothing")
		assert.Equal(t, int64(3), serve(func(ctx context.Context) { report(12)(ctx); report(3)(ctx) }), "the last call wins")
		assert.Empty(t, *errs)
		for _, bad := range []func(context.Context){nil, report(-1), report(51)} {
			assert.Equal(t, int64(50), serve(bad), "the reserve")
		}
		assert.Len(t, *errs, 3, "each heard by the ErrorHandler")

		*errs = nil
		before := used(t, f, 0)
		assert.Panics(t, func() {
			f.Serve(newRequest(), newResponse(), func(ctx context.Context) int {
				httplimit.ReportCost(ctx, 9)
				panic("handler")
			})
		})
		assert.Equal(t, int64(9), used(t, f, 0)-before, "a panic keeps the cost reported")
		before = used(t, f, 0)
		assert.Panics(t, func() {
			f.Serve(newRequest(), newResponse(), func(context.Context) int { panic("handler") })
		})
		assert.Equal(t, int64(50), used(t, f, 0)-before, "and the reserve if none")
		assert.Empty(t, *errs)
	})

	t.Run("refused-and-left", func(t *testing.T) {
		tight := core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
		f, _ := settleFlow(t, memStore(t), []httplimit.Layer{{Policy: tight, Counts: httplimit.CountFailures}})
		require.True(t, f.Serve(newRequest(), newResponse(), answer(401, nil)))
		ran := false
		w := newResponse()
		assert.False(t, f.Serve(newRequest(), w, func(context.Context) int { ran = true; return 200 }))
		assert.False(t, ran)
		assert.Equal(t, http.StatusTooManyRequests, w.status)

		// The client leaves as the store admits its request (the store
		// ends the request's context once it has decided): admitted, its
		// handler never runs, and what it reserved is given back whole.
		ctx, cancel := context.WithCancel(context.Background())
		leaving := &cancelAfter{Store: memStore(t), cancel: cancel}
		g, _ := settleFlow(t, leaving, []httplimit.Layer{{Policy: p, Counts: httplimit.CountFailures}})
		require.True(t, g.Serve(newRequest(), newResponse(), answer(401, nil)))
		r := newRequest()
		r.ctx = ctx
		leaving.armed = true
		ran = false
		assert.False(t, g.Serve(r, newResponse(), func(context.Context) int { ran = true; return 401 }))
		assert.False(t, ran, "no handler for a client that left")
		assert.True(t, leaving.admitted, "admitted before the client left")
		assert.Equal(t, int64(1), used(t, g, 0), "the request that left before its handler counts nothing")
	})

	t.Run("shadow", func(t *testing.T) {
		// In shadow mode a request admitted only because of it took
		// nothing, and gives nothing back.
		one := core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
		f, _ := settleFlow(t, memStore(t), []httplimit.Layer{{Policy: one, Counts: httplimit.CountFailures}}, httplimit.WithCore(core.WithShadow()))
		require.True(t, f.Serve(newRequest(), newResponse(), answer(401, nil)))
		for range 3 {
			require.True(t, f.Serve(newRequest(), newResponse(), answer(200, nil)), "shadow mode denies nothing")
		}
		assert.Equal(t, int64(1), used(t, f, 0), "the failure stays counted: the shadowed successes took nothing to give back")
	})

	t.Run("refund-fails", func(t *testing.T) {
		down := &downAfter{Store: memStore(t)}
		f, errs := settleFlow(t, down, []httplimit.Layer{{Policy: p, Counts: httplimit.CountFailures}})
		require.True(t, f.Serve(newRequest(), newResponse(), func(context.Context) int {
			down.down = true // the store fails between the admission and the refund
			return 200
		}))
		require.Len(t, *errs, 1)
		assert.ErrorContains(t, (*errs)[0], "settling the response")
	})
}

// cancelAfter is a store that, once armed, calls cancel after it has
// decided a request: a client leaving as its request is admitted.
type cancelAfter struct {
	core.Store
	cancel          context.CancelFunc
	armed, admitted bool
}

func (s *cancelAfter) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	at, err := s.Store.Take(ctx, now, reqs, out)
	if s.armed {
		s.armed, s.admitted = false, err == nil && out[0].Allowed
		s.cancel()
	}
	return at, err
}

// downAfter is a store that fails every call once down is set.
type downAfter struct {
	core.Store
	down bool
}

func (s *downAfter) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if s.down {
		return time.Time{}, errors.New("down")
	}
	return s.Store.Take(ctx, now, reqs, out)
}

func (s *downAfter) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if s.down {
		return errors.New("down")
	}
	return s.Store.Peek(ctx, now, reqs, out)
}

func (s *downAfter) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	if s.down {
		return errors.New("down")
	}
	return s.Store.Refund(ctx, at, reqs)
}

// BenchmarkServe is a layer through Serve, on the memory store: counting
// all (the handler's status is not read), and counting failures, for a
// failure (nothing to give back) and a success (given back).
func BenchmarkServe(b *testing.B) {
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	for _, c := range []struct {
		name   string
		counts httplimit.Counts
		status int
	}{
		{"all", httplimit.CountAll, 200},
		{"failures/failed", httplimit.CountFailures, 401},
		{"failures/succeeded", httplimit.CountFailures, 200},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := httplimit.New(memStore(b), []httplimit.Layer{{Policy: p, Counts: c.counts}})
			require.NoError(b, err)
			r, w := newRequest(), newResponse()
			next := func(context.Context) int { return c.status }
			b.ReportAllocs()
			for b.Loop() {
				if !f.Serve(r, w, next) {
					b.Fatal("denied")
				}
			}
		})
	}
}

// BenchmarkHandleReputation is BenchmarkHandle with a reputation: bans
// only (its bans a deny list), and a band that scales (a PolicySource
// too); the client has a score, below every band.
func BenchmarkHandleReputation(b *testing.B) {
	p := core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	for _, c := range []struct {
		name  string
		bands []reputation.Band
	}{
		{"none", nil},
		{"bans", []reputation.Band{{Name: "abusive", Above: 40, Ban: true}}},
		{"bans-and-scales", []reputation.Band{{Name: "suspicious", Above: 20, Scale: 0.5}, {Name: "abusive", Above: 40, Ban: true}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var opts []httplimit.Option
			if c.bands != nil {
				rep, err := reputation.New(reputation.Config{Bands: c.bands})
				require.NoError(b, err)
				rep.Record(context.Background(), "ip:192.0.2.1", reputation.Denied)
				opts = append(opts, httplimit.WithReputation(rep))
			}
			f, err := newFlow(b, memStore(b), layer(p), nil, opts...)
			require.NoError(b, err)
			r, w := newRequest(), newResponse()
			b.ReportAllocs()
			for b.Loop() {
				if !handle(f, r, w) {
					b.Fatal("denied")
				}
			}
		})
	}
}

// TestReputationBans: a reputation's ban refuses the client's requests
// on a flow of one layer and on a layered one, by the reputation's own
// key too; an allow list wins over it; and its 403 tells when it ends.
func TestReputationBans(t *testing.T) {
	ctx := context.Background()
	p := core.Policy{Name: "all", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour}
	bands := []reputation.Band{{Name: "abusive", Above: 2, Ban: true}}
	ban := func(t *testing.T, rep *reputation.Tracker, key string) {
		for range 3 {
			rep.Record(ctx, key, reputation.Denied)
		}
	}
	byHeader := keyfuncs.Func(func(r keyfuncs.Request) (string, error) {
		if v := r.Header("X-User"); v != "" {
			return "user:" + v, nil
		}
		return "", keyfuncs.ErrNoKey
	})
	for _, c := range []struct {
		name    string
		cfg     reputation.Config
		layers  []httplimit.Layer
		banned  string
		request func() *request
	}{
		{"one layer", reputation.Config{Bands: bands}, []httplimit.Layer{{Policy: p}}, "ip:192.0.2.1", newRequest},
		{"layered", reputation.Config{Bands: bands}, []httplimit.Layer{{Policy: p, Key: byHeader},
			{Policy: core.Policy{Name: "ip", Algorithm: core.FixedWindow, Limit: 1000, Window: time.Hour}}}, "ip:192.0.2.1", newRequest},
		{"own key", reputation.Config{Bands: bands, Key: byHeader}, []httplimit.Layer{{Policy: p}}, "user:alice", func() *request {
			r := newRequest()
			r.header.Set("X-User", "alice")
			return r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := reputation.New(c.cfg)
			require.NoError(t, err)
			opts := []httplimit.Option{httplimit.WithReputation(rep)}
			f, err := httplimit.New(memStore(t), c.layers, append(opts, httplimit.WithClientIP(mustClientIP(t)))...)
			require.NoError(t, err)
			r := c.request()
			r.header.Set("X-User", "alice")
			require.True(t, handle(f, r, newResponse()))
			ban(t, rep, c.banned)
			w := newResponse()
			require.False(t, handle(f, r, w), "banned")
			assert.Equal(t, http.StatusForbidden, w.status)
			assert.NotEmpty(t, w.header.Get("Retry-After"))
			other := newRequest()
			other.remote = "198.51.100.9:1"
			other.header.Set("X-User", "bob")
			assert.True(t, handle(f, other, newResponse()), "another client")

			allow, err := access.NewList(access.Entry{Prefix: netip.MustParsePrefix("192.0.2.0/24")})
			require.NoError(t, err)
			g, err := httplimit.New(memStore(t), c.layers, append(opts, httplimit.WithClientIP(mustClientIP(t)), httplimit.WithAllowList(allow))...)
			require.NoError(t, err)
			assert.True(t, handle(g, r, newResponse()), "an allow list wins over a ban")
		})
	}
}

// BenchmarkServeReputation is BenchmarkServe's plain layer with a
// reputation that bans, through Serve: what the response's signals and
// reputation.Penalize's context cost a request.
func BenchmarkServeReputation(b *testing.B) {
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}
	rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "abusive", Above: 40, Ban: true}}})
	require.NoError(b, err)
	f, err := httplimit.New(memStore(b), []httplimit.Layer{{Policy: p}}, httplimit.WithReputation(rep))
	require.NoError(b, err)
	r, w := newRequest(), newResponse()
	next := func(context.Context) int { return 200 }
	b.ReportAllocs()
	for b.Loop() {
		if !f.Serve(r, w, next) {
			b.Fatal("denied")
		}
	}
}
