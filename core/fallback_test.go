package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// flakyStore is a real memstore that fails the calls fail picks, as a
// Redis that flaps.
type flakyStore struct {
	*memstore.Store
	calls atomic.Int64
	fail  func(call int64) bool
}

var errFlap = errors.New("i/o timeout")

func (s *flakyStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if s.fail(s.calls.Add(1)) {
		return time.Time{}, errFlap
	}
	return s.Store.Take(ctx, now, reqs, out)
}

func (s *flakyStore) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if s.fail(s.calls.Add(1)) {
		return errFlap
	}
	return s.Store.Peek(ctx, now, reqs, out)
}

func (s *flakyStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	if s.fail(s.calls.Add(1)) {
		return errFlap
	}
	return s.Store.Refund(ctx, at, reqs)
}

// TestFallbackBoundsAFlappingStore is issue #6 item 8: a store that fails
// every other call (or in runs) must not let one process admit its quota
// twice, once through the store and once through the fallback. With 10 per
// hour, 200 attempts within the hour admit exactly 10, for every
// algorithm.
func TestFallbackBoundsAFlappingStore(t *testing.T) {
	patterns := []struct {
		name string
		fail func(call int64) bool
	}{
		{"every-other-call", func(n int64) bool { return n%2 == 0 }},
		{"runs-of-five", func(n int64) bool { return n/5%2 == 1 }},
		{"down-then-up", func(n int64) bool { return n > 3 && n <= 12 }},
	}
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		for _, pat := range patterns {
			t.Run(string(alg)+"/"+pat.name, func(t *testing.T) {
				primary := &flakyStore{Store: newMemStore(t), fail: pat.fail}
				local := newMemStore(t)
				now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
				p := core.Policy{Algorithm: alg, Limit: 10, Window: time.Hour}
				l, err := core.NewLimiter(primary, []core.Policy{p}, core.WithFallback(local))
				require.NoError(t, err)
				admitted, byFallback := 0, 0
				for i := range 200 {
					now = now.Add(time.Second) // 200 s: all within the hour
					d, err := l.AllowN(context.Background(), "client", 1, now)
					require.NoError(t, err)
					if d.Err != nil {
						require.ErrorIs(t, d.Err, limits.ErrStore, "attempt %d", i)
					}
					require.NotEqual(t, core.SourceFailMode, d.Source, "attempt %d: %+v", i, d)
					if d.Allowed {
						admitted++
						if d.Source == core.SourceFallback {
							byFallback++
						}
					}
				}
				assert.Equal(t, 10, admitted, "admitted %d of a limit of 10 (%d by the fallback alone)", admitted, byFallback)
				assert.Positive(t, byFallback, "the store never failed")
			})
		}
	}
}

// TestFallbackMirrorsAdmissions: while the store is healthy, the fallback
// counts what the store admits, so that an outage starts from the real
// count, not from zero; a Reset clears both.
func TestFallbackMirrorsAdmissions(t *testing.T) {
	primary := &flakyStore{Store: newMemStore(t), fail: func(int64) bool { return false }}
	local := newMemStore(t)
	p := core.Policy{Algorithm: core.SlidingWindowLog, Limit: 3, Window: time.Hour}
	l, err := core.NewLimiter(primary, []core.Policy{p}, core.WithFallback(local))
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 {
		d, err := l.AllowN(ctx, "k", 1, time.Time{})
		require.NoError(t, err)
		require.True(t, d.Allowed, "%+v", d)
		require.Equal(t, core.SourceStore, d.Source)
	}
	primary.fail = func(int64) bool { return true }
	d, err := l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, errFlap)
	require.True(t, d.Allowed, "%+v", d)
	require.Equal(t, core.SourceFallback, d.Source)
	assert.EqualValues(t, 0, d.Remaining, "the fallback did not count the store's 2 admissions")
	d, _ = l.AllowN(ctx, "k", 1, time.Time{})
	require.False(t, d.Allowed, "%+v", d)

	require.NoError(t, l.Reset(ctx, "k"), "Reset")
	d, err = l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	require.ErrorIs(t, d.Err, errFlap)
	require.True(t, d.Allowed, "%+v", d)
	require.Equal(t, core.SourceFallback, d.Source)
	require.EqualValues(t, 2, d.Remaining, "Reset left the fallback's count")
}

// TestFallbackBoundsAFlappingStoreConcurrently: the same, from 8
// goroutines at once, so that mirrors and decisions without the store
// interleave.
func TestFallbackBoundsAFlappingStoreConcurrently(t *testing.T) {
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			primary := &flakyStore{Store: newMemStore(t), fail: func(n int64) bool { return n%2 == 0 }}
			local := newMemStore(t)
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			p := core.Policy{Algorithm: alg, Limit: 10, Window: time.Hour}
			l, err := core.NewLimiter(primary, []core.Policy{p}, core.WithFallback(local))
			require.NoError(t, err)
			var admitted atomic.Int32
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 50 {
						if d, _ := l.AllowN(context.Background(), "client", 1, now); d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			assert.EqualValues(t, 10, admitted.Load())
		})
	}
}
