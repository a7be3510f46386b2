package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestDenyCacheSparesRedis: behind core.WithDenyCache, a flood of denied
// requests from one client costs Redis one script run, the first denial;
// the rest are answered in process until its RetryAfter.
func TestDenyCacheSparesRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	hook := newCommandCounter()
	c.AddHook(hook)
	p := core.Policy{Name: "flood", Algorithm: core.SlidingWindowLog, Limit: 5, Window: time.Hour}
	s := mustNew(t, c, WithPrefix(testPrefix(t)))
	waitChecked(t, s, 10*time.Second) // its INFO goes through the hook too
	l, err := core.NewLimiter(alone(s), []core.Policy{p}, core.WithDenyCache(1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "warm-up", 1, time.Time{}); err != nil { // loads the script
		t.Fatal(err)
	}
	hook.reset()
	allowed, cached := 0, 0
	for range 200 {
		d, err := l.AllowN(ctx, "flooder", 1, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
		if d.Source == core.SourceDenyCache {
			cached++
			if d.RetryAfter <= 0 || d.RetryAfter > time.Hour || d.Remaining != 0 {
				t.Fatalf("cached denial %+v", d)
			}
		}
	}
	names, _ := hook.snapshot()
	if allowed != 5 || cached != 194 || names["evalsha"] != 6 || len(names) != 1 {
		t.Fatalf("allowed %d, cached %d, commands %v; want 5 allowed, 194 cached, 6 EVALSHA", allowed, cached, names)
	}
	// Another client is not affected.
	if d, err := l.AllowN(ctx, "neighbour", 1, time.Time{}); err != nil || !d.Allowed || d.Source != core.SourceStore {
		t.Fatalf("neighbour: %+v, %v", d, err)
	}
}

// TestDenyCacheResetRace is issue #6 item 4 on a real Redis: denials and a
// Reset of the same key run at once, round after round; whenever no request
// was admitted after the Reset (Redis then holds nothing for the key), the
// next request must be admitted by Redis, never refused from the cache.
func TestDenyCacheResetRace(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.Start(t)
			opts := srv.Options()
			opts.ContextTimeoutEnabled = kind.contextDeadline
			client := redis.NewClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			p := core.Policy{Name: "reset-race", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
			// A generous timeout: a fail-open admission would hide nothing,
			// but it would make a round uncheckable.
			l, err := core.NewLimiter(mustNew(t, client, WithPrefix(testPrefix(t))), []core.Policy{p},
				core.WithDenyCache(100))

			require.NoError(t, err)
			limitertest.ResetRace(t, l, 300)
		})
	}
}
