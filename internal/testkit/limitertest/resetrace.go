// Package limitertest holds checks of a core.Limiter that several test
// packages run, each over its own store.
package limitertest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// ResetRace runs denials and a Reset of the same key at once, round after
// round, through l, which must have a deny cache and a policy of one
// request per long window. Whenever no request was admitted after the
// Reset (the store then holds nothing for the key), the next request must
// be admitted by the store, never refused from the cache. It fails t when
// no round could be checked.
func ResetRace(t *testing.T, l *core.Limiter, rounds int) {
	t.Helper()
	checked := 0
	for round := range rounds {
		if resetRaceRound(t, l, round) {
			checked++
		}
	}
	t.Logf("%d of %d rounds had no admission after the Reset, and were checked", checked, rounds)
	assert.Positive(t, checked)
}

// resetRaceRound spends the key's quota, then runs 4 requests and a Reset
// at once; it reports whether it could check the cache (no request
// admitted after the Reset).
func resetRaceRound(t *testing.T, l *core.Limiter, round int) bool {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, l.Reset(ctx, "k"))
	d, err := l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	require.True(t, d.Allowed, "round %d: a fresh quota refused: %+v", round, d)
	start := make(chan struct{})
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			<-start
			if d, err := l.AllowN(ctx, "k", 1, time.Time{}); err == nil && d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Go(func() {
		<-start
		for range round % 16 { // from before the requests to after them
			runtime.Gosched()
		}
		assert.NoError(t, l.Reset(ctx, "k"))
	})
	close(start)
	wg.Wait()
	if admitted.Load() > 0 {
		return false
	}
	d, err = l.AllowN(ctx, "k", 1, time.Time{})
	require.NoError(t, err)
	require.True(t, d.Allowed, "round %d: after the Reset, %+v", round, d)
	require.Equal(t, core.SourceStore, d.Source, "round %d: after the Reset, %+v", round, d)
	return true
}
