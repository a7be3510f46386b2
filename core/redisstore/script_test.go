package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/redistest"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestOneRoundTrip counts the commands the client sends: after warm-up,
// one EVALSHA per decision and nothing else; after SCRIPT FLUSH, the next
// decision falls back to EVAL by itself.
func TestOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	hook := newCommandCounter()
	c.AddHook(hook)
	s := New(c, WithPrefix(testPrefix(t)))
	waitChecked(t, s, 10*time.Second) // its INFO goes through the hook too
	ctx := context.Background()
	ps := policies(1000, time.Minute)
	decide := func(i int) {
		t.Helper()
		for _, p := range ps {
			// Both explicit times and Redis TIME.
			req := core.Request{Key: "k" + strconv.Itoa(i%3), Policy: p, Cost: 1}
			if i%2 == 0 {
				req.Now = t0.Add(time.Duration(i) * time.Millisecond)
			}
			if _, err := s.Take(ctx, req); err != nil {
				t.Fatalf("%s: %v", p.Algorithm, err)
			}
		}
	}
	decide(0) // loads the scripts (EVALSHA, NOSCRIPT, EVAL)
	hook.reset()
	const n = 20
	for i := range n {
		decide(i)
	}
	names, pipelines := hook.snapshot()
	want := map[string]int{"evalsha": n * len(ps)}
	if fmt.Sprint(names) != fmt.Sprint(want) || pipelines != 0 {
		t.Fatalf("%d decisions sent %v and %d pipelines, want %v and none", n*len(ps), names, pipelines, want)
	}

	if srv.External() {
		t.Skip("REDIS_URL is set: not flushing the scripts of a shared server")
	}
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.reset()
	decide(1)
	names, _ = hook.snapshot()
	want = map[string]int{"evalsha": len(ps), "eval": len(ps)}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("after SCRIPT FLUSH: %v, want %v", names, want)
	}
	hook.reset()
	decide(2)
	names, _ = hook.snapshot()
	want = map[string]int{"evalsha": len(ps)}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("after recovery: %v, want %v", names, want)
	}
}

// TestKeys checks the key layout and that Reset deletes every key of the
// client key under the policy, and only those.
func TestKeys(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	for _, p := range policies(5, time.Minute) {
		code := map[core.Algorithm]string{
			core.FixedWindow: "fw", core.SlidingWindowLog: "swl2", core.SlidingWindowCounter: "swc",
			core.TokenBucket: "tb", core.LeakyBucket: "lb",
		}[p.Algorithm]
		base := s.prefix + "{user:42}:p:" + code
		if got := s.Key("user:42", p); got != base {
			t.Fatalf("Key = %q, want %q", got, base)
		}
		for _, k := range []string{"user:42", "other"} {
			if _, err := s.Take(ctx, core.Request{Key: k, Policy: p, Cost: 2}); err != nil {
				t.Fatal(err)
			}
		}
		if n := c.Exists(ctx, base).Val(); n != 1 {
			t.Fatalf("%s: key %s missing", p.Algorithm, base)
		}
		if err := s.Reset(ctx, "user:42", p); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, base).Val(); n != 0 {
			t.Fatalf("%s: key left after Reset", p.Algorithm)
		}
		if n := c.Exists(ctx, s.Key("other", p)).Val(); n != 1 {
			t.Fatalf("%s: Reset deleted another client's key", p.Algorithm)
		}
		d, err := s.Take(ctx, core.Request{Key: "user:42", Policy: p, Cost: 1})
		if err != nil || !d.Allowed || d.Remaining != 4 {
			t.Fatalf("%s: after Reset: %+v, %v; want a whole quota", p.Algorithm, d, err)
		}
	}
	if s.Key("k", core.Policy{Algorithm: "nope"}) != "" {
		t.Fatal("Key of an unknown algorithm is not empty")
	}
}

// TestDeniedWritesNothing: a denied request leaves the state, TTL included,
// as it was.
func TestDeniedWritesNothing(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	for _, p := range policies(3, time.Hour) {
		req := core.Request{Key: "k", Policy: p, Cost: 3, Now: t0}
		if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v", p.Algorithm, d, err)
		}
		key := s.Key("k", p)
		dump := c.Dump(ctx, key).Val()
		ttl := c.PTTL(ctx, key).Val()
		req.Cost = 1
		req.Now = t0.Add(time.Millisecond)
		if d, err := s.Take(ctx, req); err != nil || d.Allowed {
			t.Fatalf("%s: %+v, %v; want denied", p.Algorithm, d, err)
		}
		if c.Dump(ctx, key).Val() != dump {
			t.Fatalf("%s: a denied request changed the state", p.Algorithm)
		}
		if got := c.PTTL(ctx, key).Val(); got > ttl {
			t.Fatalf("%s: a denied request extended the TTL from %v to %v", p.Algorithm, ttl, got)
		}
	}
}

// TestTTLs decides on many keys with Redis TIME, explicit times and costs,
// then scans every key: each has a TTL, no longer than its state matters.
func TestTTLs(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, explicit bool) {
		s, _, c := newStore(t, WithExplicitNowMinTTL(0))
		w := 2 * time.Second
		ps := policies(10, w)
		ps = append(ps,
			core.Policy{Name: "burst", Algorithm: core.TokenBucket, Limit: 10, Window: w, Burst: 30},
			core.Policy{Name: "burst", Algorithm: core.LeakyBucket, Limit: 10, Window: w, Burst: 30},
		)
		for i := range 40 {
			for _, p := range ps {
				req := core.Request{Key: "k" + strconv.Itoa(i%7), Policy: p, Cost: 1 + int64(i%4)}
				if explicit {
					req.Now = time.Now().Add(time.Duration(i) * time.Millisecond)
				}
				if _, err := s.Take(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
		}
		keys := scanKeys(t, ctx, c, s.prefix)
		// 7 client keys, one key per policy; a fixed window key may
		// already be gone if its window just ended.
		if len(keys) < 7*(len(ps)-1) || len(keys) > 7*len(ps) {
			t.Fatalf("scanned %d keys, want %d", len(keys), 7*len(ps))
		}
		for _, k := range keys {
			ttl := c.PTTL(ctx, k).Val()
			// Longest: the sliding counter's two windows; a burst of 30
			// at 10 per 2s takes 6s to refill.
			if ttl <= 0 || ttl > 6*time.Second+100*time.Millisecond {
				t.Errorf("%s: PTTL %v", k, ttl)
			}
		}
	}
	t.Run("time", func(t *testing.T) { run(t, false) })
	t.Run("explicit", func(t *testing.T) { run(t, true) })

	t.Run("explicit-min-ttl", func(t *testing.T) {
		s, _, c := newStore(t)
		p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
		// 1µs before the window ends: the state matters for 1µs of the
		// test's clock, which may stand still for seconds of real time.
		at := t0.Add(time.Second - time.Microsecond)
		if _, err := s.Take(ctx, core.Request{Key: "k", Policy: p, Cost: 1, Now: at}); err != nil {
			t.Fatal(err)
		}
		ttl := c.PTTL(ctx, s.Key("k", p)).Val()
		if ttl < DefaultExplicitNowMinTTL-time.Second || ttl > DefaultExplicitNowMinTTL {
			t.Fatalf("PTTL %v, want about %v", ttl, DefaultExplicitNowMinTTL)
		}
	})
}

// TestRedisTime checks that a request without Now is decided at Redis
// TIME, not at the app server's clock.
func TestRedisTime(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour}
	d, err := s.Take(ctx, core.Request{Key: "k", Policy: p, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	end := now.Truncate(time.Hour).Add(time.Hour)
	if diff := end.Sub(now) - d.ResetAfter; diff < -time.Second || diff > time.Second {
		t.Fatalf("ResetAfter %v, Redis TIME says %v to the end of the window", d.ResetAfter, end.Sub(now))
	}
	state, err := c.HGetAll(ctx, s.Key("k", p)).Result()
	if err != nil {
		t.Fatal(err)
	}
	last, _ := strconv.ParseInt(state["t"], 10, 64)
	if got := time.UnixMicro(last); got.Sub(now).Abs() > time.Second {
		t.Fatalf("state time %v, Redis TIME %v", got, now)
	}
}

// TestTakeRejects: requests the Limiter never sends fail cleanly, without
// a round trip.
func TestTakeRejects(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	for _, c := range []struct {
		req  core.Request
		want error
	}{
		{core.Request{Key: "", Policy: p, Cost: 1}, core.ErrInvalidKey},
		{core.Request{Key: "k", Policy: p, Cost: 0}, core.ErrInvalidCost},
		{core.Request{Key: "k", Policy: p, Cost: 6}, core.ErrCostExceedsLimit},
		{core.Request{Key: "k", Policy: core.Policy{Algorithm: "gcra", Limit: 1, Window: time.Second}, Cost: 1}, core.ErrInvalidPolicy},
		{core.Request{Key: "k", Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 1}, Cost: 1}, core.ErrInvalidPolicy},
		{core.Request{Key: "k", Policy: core.Policy{Algorithm: core.TokenBucket, Window: time.Second}, Cost: 1}, core.ErrInvalidPolicy},
	} {
		if _, err := s.Take(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("Take(%+v) = %v, want %v", c.req, err, c.want)
		}
	}
	if err := s.Reset(ctx, "k", core.Policy{Algorithm: "gcra"}); !errors.Is(err, core.ErrInvalidPolicy) {
		t.Errorf("Reset of an unknown algorithm: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// TestWrongType: a key of another type surfaces as an error, never a
// decision.
func TestWrongType(t *testing.T) {
	s, _, c := newStore(t)
	ctx := context.Background()
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 10, Window: time.Second}
	if err := c.Set(ctx, s.Key("k", p), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Take(ctx, core.Request{Key: "k", Policy: p, Cost: 1})
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Take over a string key: %v, want WRONGTYPE", err)
	}
}
