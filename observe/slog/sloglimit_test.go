package sloglimit_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	sloglimit "github.com/apigate/ratelimit/observe/slog"
)

// TestFlood sends 10,000 denials over 4 virtual seconds, one per 400µs:
// the default sampler writes its burst of 10, then one record per 100ms
// (one per 250 denials), each carrying the count dropped before it.
func TestFlood(t *testing.T) {
	ctx := context.Background()
	c, s := new(clock), newSink()
	l := newLimiter(t, newMemStore(t), hourly, core.WithObserver(newLogger(t, s, c)))
	const key = "ip:203.0.113.7"
	d, err := l.AllowN(ctx, key, 1, c.Now())
	require.NoError(t, err)
	require.True(t, d.Allowed)

	const n, step = 10000, 400 * time.Microsecond
	for k := range n {
		c.ns.Store(int64(k) * int64(step))
		d, err := l.AllowN(ctx, key, 1, c.Now())
		require.NoError(t, err)
		require.False(t, d.Allowed)
	}
	recs := s.records(t)
	require.Len(t, recs, 10+39) // k = 0..9, then k = 250, 500, ... 9750
	total := int64(len(recs))
	for i, r := range recs {
		sup := num(t, r, "suppressed")
		total += sup
		switch {
		case i < 10:
			assert.NotContains(t, r, "suppressed", "record %d", i)
		case i == 10:
			assert.Equal(t, int64(250-10), sup, "record %d", i)
		default:
			assert.Equal(t, int64(249), sup, "record %d", i)
		}
		if i >= 10 { // the record of denial k = 250(i-9), at (i-9) * 100ms
			m := time.Duration(i - 9)
			assert.Equal(t, int64(time.Hour-m*100*time.Millisecond), num(t, r, "retry_after"), "record %d", i)
		}
	}
	assert.Equal(t, int64(n-249), total) // k = 9751..9999 wait for the next record

	// The next record, however late, tells the rest of the flood.
	c.Advance(time.Minute)
	_, err = l.AllowN(ctx, key, 1, c.Now())
	require.NoError(t, err)
	recs = s.records(t)
	require.Len(t, recs, 1)
	assert.Equal(t, int64(249), num(t, recs[0], "suppressed"))
}

// TestRecordFields checks every attribute of a denial's record.
func TestRecordFields(t *testing.T) {
	ctx := context.Background()
	c, s := new(clock), newSink()
	l := newLimiter(t, newMemStore(t), hourly, core.WithObserver(newLogger(t, s, c)))
	_, err := l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
	require.NoError(t, err)
	_, err = l.AllowN(ctx, "ip:203.0.113.7", 1, t0.Add(time.Minute))
	require.NoError(t, err)
	recs := s.records(t)
	require.Len(t, recs, 1)
	r := recs[0]
	delete(r, "time")
	assert.Equal(t, map[string]any{
		"level":       "INFO",
		"msg":         "rate limit: request denied",
		"limit":       "hourly",
		"outcome":     "denied",
		"cost":        json1,
		"remaining":   json0,
		"retry_after": jsonNum(int64(59 * time.Minute)),
		"source":      "store",
		"key":         "ip:203.0.113.7",
	}, r)
}

// TestSamplerPerLimit: a flood on one limit leaves the others' records
// alone, and events given to Observe directly have samplers of their own.
func TestSamplerPerLimit(t *testing.T) {
	ctx := context.Background()
	c, s := new(clock), newSink()
	lg := newLogger(t, s, c)
	a := newLimiter(t, newMemStore(t), core.Policy{Name: "a", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}, core.WithObserver(lg))
	b := newLimiter(t, newMemStore(t), core.Policy{Name: "b", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}, core.WithObserver(lg))
	for range 1001 {
		_, err := a.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		require.NoError(t, err)
	}
	for range 2 {
		_, err := b.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		require.NoError(t, err)
	}
	direct, err := lg.Bind(nil) // a third Limiter's samplers
	require.NoError(t, err)
	direct(core.Event{Key: "ip:203.0.113.8", Cost: 1, Binding: true, Decision: core.Decision{Policy: core.Policy{Name: "direct"}}})
	recs := s.records(t)
	require.Len(t, recs, 12)
	for _, r := range recs[:10] {
		assert.Equal(t, "a", r["limit"])
		assert.NotContains(t, r, "suppressed")
	}
	assert.Equal(t, "b", recs[10]["limit"])
	assert.NotContains(t, recs[10], "suppressed")
	assert.Equal(t, "direct", recs[11]["limit"])

	c.Advance(time.Second) // 10 more records' worth
	_, err = a.AllowN(ctx, "ip:203.0.113.7", 1, t0)
	require.NoError(t, err)
	recs = s.records(t)
	require.Len(t, recs, 1)
	assert.Equal(t, int64(990), num(t, recs[0], "suppressed"))
}

// TestStoreFailures: store failures are logged at Warn with their kind
// and text, sampled apart from the denials, so that a flood of denials
// cannot hide an outage.
func TestStoreFailures(t *testing.T) {
	ctx := context.Background()
	c, s := new(clock), newSink()
	f := &flaky{Store: newMemStore(t)}
	l := newLimiter(t, f, hourly, core.WithObserver(newLogger(t, s, c)))
	for range 101 { // one admission, 100 denials: the denials' burst is spent
		_, err := l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		require.NoError(t, err)
	}
	require.Len(t, s.records(t), 10)

	f.down.Store(true)
	for range 100 {
		d, err := l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		require.NoError(t, err)
		require.ErrorIs(t, d.Err, limits.ErrStore)
		require.True(t, d.Allowed) // FailOpen
	}
	recs := s.records(t)
	require.Len(t, recs, 10)
	for i, r := range recs {
		assert.Equal(t, "WARN", r["level"])
		assert.Equal(t, "rate limit: store failed", r["msg"])
		assert.Equal(t, "failed_open", r["outcome"])
		assert.Equal(t, "fail-mode", r["source"])
		assert.Equal(t, "ip:203.0.113.7", r["key"])
		if i < 3 {
			assert.Equal(t, outcome.StoreErrFailed, r["error_kind"], "record %d", i)
			assert.Contains(t, r["error"], "take ip:203.0.113.7: connection refused")
		} else {
			assert.Equal(t, outcome.StoreErrCircuitOpen, r["error_kind"], "record %d", i)
			assert.Contains(t, r["error"], "circuit breaker open")
		}
		assert.NotContains(t, r, "suppressed")
	}

	c.Advance(time.Second)
	d, err := l.AllowN(ctx, "ip:203.0.113.7", 1, t0) // the breaker is still open
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, limits.ErrCircuitOpen)
	recs = s.records(t)
	require.Len(t, recs, 1)
	assert.Equal(t, int64(90), num(t, recs[0], "suppressed"))
}

// TestOutcomes checks which outcomes are logged by default, at which
// level, and what WithOutcomes changes.
func TestOutcomes(t *testing.T) {
	ctx := context.Background()
	type rec struct{ level, msg, outcome, source, kind string }
	cases := []struct {
		name       string
		opts       []core.Option
		failClosed time.Duration
		down       bool
		run        func(l *core.Limiter)
		want       []rec
	}{{
		name: "allowed, canceled and invalid are not logged",
		run: func(l *core.Limiter) {
			_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			_, _ = l.AllowN(canceled, "ip:203.0.113.7", 1, t0)
			_, _ = l.AllowN(ctx, "ip:203.0.113.7", 0, t0)
			_, _ = l.AllowN(ctx, "", 1, t0)
		},
	}, {
		name: "deny cache",
		opts: []core.Option{core.WithDenyCache(10)},
		run: func(l *core.Limiter) {
			for range 3 {
				_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
			}
		},
		want: []rec{
			{"INFO", "rate limit: request denied", "denied", "store", ""},
			{"INFO", "rate limit: request denied", "deny_cache", "deny-cache", ""},
		},
	}, {
		name: "fallback",
		down: true,
		run: func(l *core.Limiter) {
			for range 2 {
				_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
			}
		},
		want: []rec{
			{"WARN", "rate limit: store failed", "fallback_allowed", "fallback", "error"},
			{"WARN", "rate limit: store failed", "fallback_denied", "fallback", "error"},
		},
	}, {
		name:       "failed closed",
		failClosed: time.Second,
		down:       true,
		run: func(l *core.Limiter) {
			_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		},
		want: []rec{{"WARN", "rate limit: store failed", "failed_closed", "fail-mode", "error"}},
	}, {
		name: "shadow",
		opts: []core.Option{core.WithShadow()},
		run: func(l *core.Limiter) {
			for range 2 {
				_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
			}
		},
		want: []rec{{"INFO", "rate limit: request would have been denied (shadow mode)", "shadow_denied", "store", ""}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := new(clock), newSink()
			f := &flaky{Store: newMemStore(t)}
			f.down.Store(tc.down)
			opts := append([]core.Option{core.WithObserver(newLogger(t, s, c))}, tc.opts...)
			if tc.name == "fallback" {
				opts = append(opts, core.WithFallback(newMemStore(t)))
			}
			p := hourly
			p.FailClosed = tc.failClosed
			tc.run(newLimiter(t, f, p, opts...))
			var got []rec
			for _, r := range s.records(t) {
				kind, _ := r["error_kind"].(string)
				got = append(got, rec{r["level"].(string), r["msg"].(string), r["outcome"].(string), r["source"].(string), kind})
			}
			assert.Equal(t, tc.want, got)
		})
	}

	t.Run("lockout", func(t *testing.T) {
		c, s := new(clock), newSink()
		p := hourly
		p.Lockout = 2 * time.Hour
		l := newLimiter(t, newMemStore(t), p, core.WithObserver(newLogger(t, s, c)))
		for range 2 { // allowed (not logged), then locked out
			_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		}
		recs := s.records(t)
		require.Len(t, recs, 1)
		assert.Equal(t, "rate limit: request denied", recs[0]["msg"])
		assert.Equal(t, "locked_out", recs[0]["outcome"])
		assert.Equal(t, int64(2*time.Hour), num(t, recs[0], "retry_after"))
	})

	t.Run("WithOutcomes", func(t *testing.T) {
		c, s := new(clock), newSink()
		lg := newLogger(t, s, c, sloglimit.WithOutcomes("allowed", "canceled", "invalid"))
		l := newLimiter(t, newMemStore(t), hourly, core.WithObserver(lg))
		for range 2 { // allowed, then denied (not logged)
			_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
		}
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		_, _ = l.AllowN(canceled, "ip:203.0.113.7", 1, t0)
		_, _ = l.AllowN(ctx, "ip:203.0.113.7", 0, t0)
		recs := s.records(t)
		require.Len(t, recs, 3)
		assert.Equal(t, "rate limit: request allowed", recs[0]["msg"])
		assert.Equal(t, "rate limit: request canceled", recs[1]["msg"])
		assert.Contains(t, recs[1]["error"], "context canceled")
		assert.NotContains(t, recs[1], "error_kind")
		assert.Equal(t, "rate limit: request invalid", recs[2]["msg"])
		assert.Contains(t, recs[2]["error"], "cost 0")
		assert.NotContains(t, recs[2], "key") // refused before the key was read
		for _, r := range recs {
			assert.Equal(t, "INFO", r["level"])
		}
	})
}

// TestLevels: the levels are set by the options, and a level the logger
// does not enable neither writes nor counts a record.
func TestLevels(t *testing.T) {
	ctx := context.Background()
	c, s := new(clock), newSink()
	f := &flaky{Store: newMemStore(t)}
	lg := newLogger(t, s, c, sloglimit.WithLevels(slog.LevelDebug, slog.LevelError))
	l := newLimiter(t, f, hourly, core.WithObserver(lg), core.WithCircuitBreaker(0, time.Second))

	s.level.Set(slog.LevelInfo)
	for range 100 {
		_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
	}
	assert.Empty(t, s.records(t))

	s.level.Set(slog.LevelDebug)
	_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
	f.down.Store(true)
	_, _ = l.AllowN(ctx, "ip:203.0.113.7", 1, t0)
	recs := s.records(t)
	require.Len(t, recs, 2)
	assert.Equal(t, "DEBUG", recs[0]["level"])
	assert.NotContains(t, recs[0], "suppressed") // the disabled ones were not counted
	assert.Equal(t, "ERROR", recs[1]["level"])
}

// TestConcurrent floods two limiters from many goroutines: every denial
// is either written or counted in the suppressed of a later record.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	c, s := new(clock), newSink()
	lg := newLogger(t, s, c)
	limiters := []*core.Limiter{
		newLimiter(t, newMemStore(t), core.Policy{Name: "a", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}, core.WithObserver(lg)),
		newLimiter(t, newMemStore(t), core.Policy{Name: "b", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour}, core.WithObserver(lg), core.WithDenyCache(100)),
	}
	keys := []string{"ip:203.0.113.7", "ip:2001:db8::/56", "user:alice"}
	for _, l := range limiters {
		for _, k := range keys {
			d, err := l.AllowN(ctx, k, 1, t0)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	const goroutines, each = 16, 1000 // 16,000 denials over 800ms of virtual time
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				l, k := limiters[(g+i)%2], keys[i%3]
				d, err := l.AllowN(ctx, k, 1, c.AdvanceNow(50*time.Microsecond))
				if err != nil || d.Allowed {
					t.Errorf("%+v, %v", d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	c.Advance(time.Minute)
	for _, l := range limiters { // the last records, carrying the rest
		_, err := l.AllowN(ctx, keys[0], 1, c.Now())
		require.NoError(t, err)
	}
	written := map[string]int64{}
	total := int64(0)
	for _, r := range s.records(t) {
		written[r["limit"].(string)]++
		total += 1 + num(t, r, "suppressed")
	}
	assert.Equal(t, int64(goroutines*each+2), total)
	for _, name := range []string{"a", "b"} {
		// At most a burst and 10 per second over 800ms, and the last one.
		assert.LessOrEqual(t, written[name], int64(10+8+1), name)
		assert.GreaterOrEqual(t, written[name], int64(10+1), name)
	}
}

// TestOptions checks that bad options fail New, wrapping
// core.ErrInvalidOption.
func TestOptions(t *testing.T) {
	bad := map[string]sloglimit.Option{
		"nil":                  nil,
		"no outcome":           sloglimit.WithOutcomes(),
		"unknown outcome":      sloglimit.WithOutcomes("denied", "refused"),
		"empty outcome":        sloglimit.WithOutcomes(""),
		"outcome of odd case":  sloglimit.WithOutcomes("Denied"),
		"zero rate":            sloglimit.WithSampling(0, 1),
		"negative rate":        sloglimit.WithSampling(-1, 1),
		"NaN rate":             sloglimit.WithSampling(nan(), 1),
		"infinite rate":        sloglimit.WithSampling(inf(), 1),
		"rate over 1e9":        sloglimit.WithSampling(2e9, 1),
		"zero burst":           sloglimit.WithSampling(1, 0),
		"negative burst":       sloglimit.WithSampling(1, -1),
		"burst over a century": sloglimit.WithSampling(1e-10, 1),
		"unknown key mode":     sloglimit.WithKeys(sloglimit.KeyMode(9), nil),
	}
	for name, opt := range bad {
		t.Run(name, func(t *testing.T) {
			lg, err := sloglimit.New(nil, sloglimit.WithLevels(slog.LevelInfo, slog.LevelWarn), opt)
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.True(t, strings.HasPrefix(strings.TrimPrefix(err.Error(), core.ErrInvalidOption.Error()+": "), "sloglimit."), err.Error())
			assert.Nil(t, lg)
		})
	}
	for _, opt := range []sloglimit.Option{
		sloglimit.WithSampling(1e9, 1),
		sloglimit.WithSampling(1.0/3600, 24),
		sloglimit.WithOutcomes(outcomeNames()...),
		sloglimit.WithKeys(sloglimit.KeysHidden, nil),
		sloglimit.WithKeys(sloglimit.KeysHashed, []byte("s")),
		sloglimit.WithKeys(sloglimit.KeysSafe, []byte{}), // no secret: SHA-256
	} {
		_, err := sloglimit.New(nil, opt)
		require.NoError(t, err)
	}
	_, err := sloglimit.New(nil, sloglimit.WithOutcomes("denied", "refused"))
	assert.ErrorContains(t, err, `unknown outcome "refused"`)
	assert.ErrorContains(t, err, `"allowed", "denied"`, "the error lists the names")
}

// TestNilLogger: a nil logger is slog.Default().
func TestNilLogger(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	s := newSink()
	slog.SetDefault(s.logger())
	lg, err := sloglimit.New(nil)
	require.NoError(t, err)
	observe, err := lg.Bind(nil)
	require.NoError(t, err)
	observe(core.Event{Key: "ip:203.0.113.7", Cost: 1, Binding: true, Decision: core.Decision{Policy: core.Policy{Name: "p"}}})
	recs := s.records(t)
	require.Len(t, recs, 1)
	assert.Equal(t, "p", recs[0]["limit"])
}
