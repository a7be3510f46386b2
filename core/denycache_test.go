package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
)

func TestDenyCache(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s := &fakeStore{answer: core.Decision{Limit: 10, Remaining: 1, ResetAfter: time.Second, RetryAfter: 300 * time.Millisecond}}
	l, err := core.NewLimiter(s, tb10, core.WithClock(func() time.Time { return now }), core.WithDenyCache(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	asked := func() int { return len(s.reqs) }
	allow := func(key string, cost int64) core.Decision {
		t.Helper()
		d, err := l.AllowN(ctx, key, cost)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	if d := allow("a", 2); d.Allowed || d.Cached || asked() != 1 {
		t.Fatalf("first denial: %+v after %d store calls", d, asked())
	}
	now = t0.Add(100*time.Millisecond + 500*time.Microsecond)
	d := allow("a", 2)
	if asked() != 1 || !d.Cached || d.Allowed {
		t.Fatalf("repeat within RetryAfter: %+v after %d store calls, want it cached", d, asked())
	}
	// 300ms - 100.5ms = 199.5ms, rounded up; the reset likewise.
	if d.RetryAfter != 200*time.Millisecond || d.ResetAfter != 900*time.Millisecond || d.Remaining != 1 || d.Limit != 10 || d.Policy.Name == "" {
		t.Fatalf("cached denial = %+v", d)
	}
	if allow("a", 3); asked() != 1 {
		t.Fatal("a costlier request was sent to the store")
	}
	if allow("a", 1); asked() != 2 {
		t.Fatal("a cheaper request, which may fit sooner, was answered from the cache")
	}
	if allow("b", 2); asked() != 3 {
		t.Fatal("another client's request was answered from the cache")
	}

	// The cache holds two clients: a third denial is not remembered.
	allow("c", 2)
	if allow("c", 2); asked() != 5 {
		t.Fatalf("store calls = %d: the cache grew past its size", asked())
	}

	// Once RetryAfter has passed, the store decides again: the latest
	// denial of "a" (the cheaper request, at 100.5ms) lasts until 400.5ms.
	now = t0.Add(400 * time.Millisecond)
	if d := allow("a", 2); !d.Cached || d.RetryAfter != time.Millisecond || asked() != 5 {
		t.Fatalf("just before RetryAfter: %+v after %d store calls", d, asked())
	}
	now = t0.Add(400*time.Millisecond + 500*time.Microsecond)
	if d := allow("a", 2); d.Cached || asked() != 6 {
		t.Fatalf("after RetryAfter: %+v after %d store calls", d, asked())
	}

	// Reset forgets the denial.
	if err := l.Reset(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if allow("a", 2); asked() != 7 {
		t.Fatal("a reset key was answered from the cache")
	}

	// Admissions are never cached.
	s.answer = core.Decision{Allowed: true, Limit: 10, Remaining: 5}
	allow("d", 1)
	if d := allow("d", 1); !d.Allowed || d.Cached || asked() != 9 {
		t.Fatalf("admission: %+v after %d store calls", d, asked())
	}
}

func TestDenyCacheRejectsBadSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := core.NewLimiter(&fakeStore{}, tb10, core.WithDenyCache(n)); !errors.Is(err, core.ErrInvalidOption) {
			t.Fatalf("WithDenyCache(%d): %v, want ErrInvalidOption", n, err)
		}
	}
}
