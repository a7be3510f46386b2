package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/redistest"
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
	s := New(c, WithPrefix(testPrefix(t)))
	waitChecked(t, s, 10*time.Second) // its INFO goes through the hook too
	l, err := core.NewLimiter(s, p, core.WithDenyCache(1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Allow(ctx, "warm-up"); err != nil { // loads the script
		t.Fatal(err)
	}
	hook.reset()
	allowed, cached := 0, 0
	for range 200 {
		d, err := l.Allow(ctx, "flooder")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
		if d.Cached {
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
	if d, err := l.Allow(ctx, "neighbour"); err != nil || !d.Allowed || d.Cached {
		t.Fatalf("neighbour: %+v, %v", d, err)
	}
}
