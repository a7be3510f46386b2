package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// boundedStore is a core.BoundedTaker that records how it was called.
// When late is set, TakeBy answers at its deadline with an error, as a
// store whose Redis stopped answering does.
type boundedStore struct {
	mode      core.CallMode
	late      bool
	mu        sync.Mutex
	takes     int
	deadlines []time.Time
	resets    int
}

func (s *boundedStore) Take(context.Context, core.Request) (core.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	return core.Decision{Allowed: true, Remaining: 1}, nil
}

func (s *boundedStore) TakeBy(_ context.Context, _ core.Request, deadline time.Time) (core.Decision, error) {
	s.mu.Lock()
	s.deadlines = append(s.deadlines, deadline)
	s.mu.Unlock()
	if s.late {
		<-time.After(time.Until(deadline)) // the store's own bound
		return core.Decision{}, context.DeadlineExceeded
	}
	return core.Decision{Allowed: true, Remaining: 2}, nil
}

func (s *boundedStore) Reset(context.Context, string, core.Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets++
	return nil
}

func (s *boundedStore) CallMode() core.CallMode { return s.mode }

var _ core.BoundedTaker = (*boundedStore)(nil)

// TestBoundedTaker: a Limiter calls TakeBy, with the earlier of its
// timeout and the caller's deadline, over a store that is not CallDirect;
// Take over a CallDirect one; Reset as ever.
func TestBoundedTaker(t *testing.T) {
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	for _, mode := range []core.CallMode{core.CallBounded, core.CallWithDeadline, core.CallDirect} {
		s := &boundedStore{mode: mode}
		l, err := core.NewLimiter(s, p, core.WithTimeout(time.Hour))
		require.NoError(t, err)
		before := time.Now()
		d, err := l.Allow(context.Background(), "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, core.SourceStore, d.Source)
		assert.Equal(t, l.Policy(), d.Policy)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = l.Allow(ctx, "k")
		cancel()
		require.NoError(t, err)
		require.NoError(t, l.Reset(context.Background(), "k"))
		assert.Equal(t, 1, s.resets, "mode %d: resets", mode)
		if mode == core.CallDirect {
			assert.Equal(t, 2, s.takes, "CallDirect: Take")
			assert.Empty(t, s.deadlines, "CallDirect: TakeBy")
			continue
		}
		assert.Zero(t, s.takes, "mode %d: Take", mode)
		require.Len(t, s.deadlines, 2, "mode %d: TakeBy", mode)
		assert.WithinDuration(t, before.Add(time.Hour), s.deadlines[0], time.Minute, "mode %d: the Limiter's timeout", mode)
		assert.WithinDuration(t, before.Add(time.Minute), s.deadlines[1], 30*time.Second, "mode %d: the caller's deadline", mode)
	}
}

// TestBoundedTakerTimeout: a TakeBy that fails at its deadline is a
// timeout: ErrStore and ErrTimeout, and the fail mode decides.
func TestBoundedTakerTimeout(t *testing.T) {
	s := &boundedStore{mode: core.CallBounded, late: true}
	p := core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	l, err := core.NewLimiter(s, p, core.WithTimeout(5*time.Millisecond), core.WithFailMode(core.FailClosed))
	require.NoError(t, err)
	d, err := l.Allow(context.Background(), "k")
	require.ErrorIs(t, err, core.ErrStore)
	require.ErrorIs(t, err, core.ErrTimeout)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.False(t, d.Allowed)
	assert.Equal(t, core.SourceFailMode, d.Source)
}
