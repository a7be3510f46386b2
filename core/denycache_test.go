package core_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

func TestDenyCache(t *testing.T) {
	now := t0
	s := &fakeStore{answer: core.Decision{Limit: 10, Remaining: 1, ResetAfter: time.Second, RetryAfter: 300 * time.Millisecond}}
	l, err := core.NewLimiter(s, []core.Policy{tb10}, core.WithDenyCache(2))
	require.NoError(t, err)
	ctx := context.Background()
	asked := func() int { return len(s.reqs) }
	allow := func(key string, cost int64) core.Decision {
		t.Helper()
		d, err := l.AllowN(ctx, key, cost, now)
		require.NoError(t, err)
		return d
	}

	d := allow("a", 2)
	require.Equal(t, 1, asked(), "first denial")
	assert.False(t, d.Allowed)
	assert.Equal(t, core.SourceStore, d.Source, "first denial")

	now = t0.Add(100*time.Millisecond + 500*time.Microsecond)
	d = allow("a", 2)
	require.Equal(t, 1, asked(), "a repeat within RetryAfter was not answered from the cache")
	assert.False(t, d.Allowed)
	assert.Equal(t, core.SourceDenyCache, d.Source)
	// 300ms - 100.5ms = 199.5ms, rounded up; the reset likewise.
	assert.Equal(t, 200*time.Millisecond, d.RetryAfter)
	assert.Equal(t, 900*time.Millisecond, d.ResetAfter)
	assert.EqualValues(t, 1, d.Remaining)
	assert.EqualValues(t, 10, d.Limit)
	assert.Equal(t, limits.DefaultName(tb10.Algorithm, tb10.Limit, tb10.Window, tb10.Burst), d.Policy.Name)

	allow("a", 3)
	require.Equal(t, 1, asked(), "a costlier request was sent to the store")
	allow("a", 1)
	require.Equal(t, 2, asked(), "a cheaper request, which may fit sooner, was answered from the cache")
	allow("b", 2)
	require.Equal(t, 3, asked(), "another client's request was answered from the cache")

	// The cache holds two clients: a third denial is not remembered.
	allow("c", 2)
	allow("c", 2)
	require.Equal(t, 5, asked(), "the cache grew past its size")

	// Once RetryAfter has passed, the store decides again: the latest
	// denial of "a" (the cheaper request, at 100.5ms) lasts until 400.5ms.
	now = t0.Add(400 * time.Millisecond)
	d = allow("a", 2)
	require.Equal(t, 5, asked(), "just before RetryAfter")
	assert.Equal(t, core.SourceDenyCache, d.Source, "just before RetryAfter")
	assert.Equal(t, time.Millisecond, d.RetryAfter, "just before RetryAfter")
	now = t0.Add(400*time.Millisecond + 500*time.Microsecond)
	d = allow("a", 2)
	require.Equal(t, 6, asked(), "after RetryAfter")
	assert.Equal(t, core.SourceStore, d.Source, "after RetryAfter")

	// Reset forgets the denial.
	require.NoError(t, l.Reset(ctx, "a"))
	allow("a", 2)
	require.Equal(t, 7, asked(), "a reset key was answered from the cache")

	// Admissions are never cached.
	s.answer = core.Decision{Allowed: true, Limit: 10, Remaining: 5}
	allow("d", 1)
	d = allow("d", 1)
	require.Equal(t, 9, asked(), "an admission was answered from the cache")
	assert.True(t, d.Allowed)
	assert.Equal(t, core.SourceStore, d.Source)
}

// TestDenyCacheCountsOnTheRealClock: without an explicit time, a denial
// is remembered for its RetryAfter on the real clock.
func TestDenyCacheCountsOnTheRealClock(t *testing.T) {
	s := &fakeStore{answer: core.Decision{Limit: 10, RetryAfter: time.Hour, ResetAfter: time.Hour}}
	l, err := core.NewLimiter(s, []core.Policy{tb10}, core.WithDenyCache(1))
	require.NoError(t, err)
	ctx := context.Background()
	for range 3 {
		_, err := l.AllowN(ctx, "k", 1, time.Time{})
		require.NoError(t, err)
	}
	assert.Len(t, s.reqs, 1, "denials within the hour were not answered from the cache")
	d, err := l.AllowN(ctx, "k", 1, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, core.SourceStore, d.Source, "a denial outlived its RetryAfter")
	assert.Len(t, s.reqs, 2)
}

func TestDenyCacheRejectsBadSize(t *testing.T) {
	for _, n := range []int{0, -1} {
		_, err := core.NewLimiter(&fakeStore{}, []core.Policy{tb10}, core.WithDenyCache(n))
		require.ErrorIs(t, err, core.ErrInvalidOption, "WithDenyCache(%d)", n)
	}
}

// TestDenyCacheDropsADenialThatCrossesAReset: a denial the store made
// before a Reset, but which reaches the cache after the Reset has
// returned, is not remembered (issue #6 item 4, made deterministic with a
// store the test holds mid-call).
func TestDenyCacheDropsADenialThatCrossesAReset(t *testing.T) {
	gate := newGateStore()
	l, err := core.NewLimiter(gate, []core.Policy{tb10}, core.WithDenyCache(10))
	require.NoError(t, err)
	ctx := context.Background()
	res := allowAsync(ctx, l)
	gate.storeCtx(t) // the store is deciding...
	require.NoError(t, l.Reset(ctx, "k"))
	gate.answers <- answer{d: core.Decision{Limit: 10, RetryAfter: time.Hour, ResetAfter: time.Hour}} // ...a denial from before the Reset
	a := wait(t, res)
	require.NoError(t, a.err)
	require.False(t, a.d.Allowed)

	res = allowAsync(ctx, l)
	select {
	case <-gate.entered:
	case a := <-res:
		t.Fatalf("after the Reset, answered without the store: %+v", a.d)
	}
	gate.answers <- answer{d: core.Decision{Allowed: true, Limit: 10, Remaining: 9}}
	a = wait(t, res)
	require.NoError(t, a.err)
	require.True(t, a.d.Allowed, "%+v", a.d)
	require.Equal(t, core.SourceStore, a.d.Source)
}

// TestDenyCacheResetRace runs denials and a Reset of the same key at once,
// over and over, on a real memstore: whenever no request was admitted after
// the Reset (the store then holds nothing for the key), the next request
// must be admitted by the store, never refused from the cache.
func TestDenyCacheResetRace(t *testing.T) {
	s := newMemStore(t)
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	l, err := core.NewLimiter(s, []core.Policy{p}, core.WithDenyCache(100))
	require.NoError(t, err)
	limitertest.ResetRace(t, l, 500)
}

// TestDenyCacheCopiesKeys: the cache keeps a key of its own, not the
// caller's, whose bytes may be reused for the next request (Fiber's
// zero-copy strings, simulated with unsafe.String over a buffer).
func TestDenyCacheCopiesKeys(t *testing.T) {
	clock := &testClock{}
	s := &fakeStore{answer: core.Decision{Limit: 10, RetryAfter: time.Minute, ResetAfter: time.Minute}}
	l, err := core.NewLimiter(s, []core.Policy{tb10}, core.WithDenyCache(10))
	require.NoError(t, err)
	ctx := context.Background()
	a, b := strings.Repeat("a", 100), strings.Repeat("b", 100)
	asked := func() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.reqs) }

	for round, overwrite := range []bool{false, true} {
		buf := []byte(a)
		zeroCopy := unsafe.String(&buf[0], len(buf))
		n := asked()
		d, err := l.AllowN(ctx, zeroCopy, 1, clock.now()) // remembered: inserted, then overwritten
		require.NoError(t, err)
		require.False(t, d.Allowed, "round %d: %+v", round, d)
		require.Equal(t, core.SourceStore, d.Source, "round %d", round)
		require.Equal(t, n+1, asked())
		copy(buf, b) // the framework reuses the buffer

		d, _ = l.AllowN(ctx, strings.Clone(b), 1, clock.now())
		assert.Equal(t, core.SourceStore, d.Source, "round %d (overwrite %v): a new client refused from the cache", round, overwrite)
		d, _ = l.AllowN(ctx, strings.Clone(a), 1, clock.now())
		assert.Equal(t, core.SourceDenyCache, d.Source, "round %d (overwrite %v): the denied client was forgotten", round, overwrite)
		require.NoError(t, l.Reset(ctx, b))
		clock.advance(time.Minute) // every denial has expired
	}
}
