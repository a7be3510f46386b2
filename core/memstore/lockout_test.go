package memstore

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// lockEntry returns the lockout state of key under p, or nil.
func lockEntry(s *Store, key string, p core.Policy) *state {
	h := s.hash(key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.find(h, key, p.Name, kindOf(p.Algorithm)|lockBit); e != nil {
		return &e.st
	}
	return nil
}

func lockoutPolicy() core.Policy {
	return core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second,
		Lockout: time.Minute, LockoutMax: 4 * time.Minute, LockoutMemory: time.Hour}
}

// TestLockoutEntry: an offence writes a lockout entry beside the state,
// which lives until the strikes are forgotten; a request during the
// lockout changes neither; Reset removes both.
func TestLockoutEntry(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := lockoutPolicy()
	start := t0.Truncate(time.Second)
	mustTake(t, s, "k", p, 1, start)
	require.Nil(t, lockEntry(s, "k", p), "no offence, no lockout entry")
	require.Equal(t, 1, s.Len())
	d := mustTake(t, s, "k", p, 1, start)
	require.True(t, d.LockedOut)
	lock := lockEntry(s, "k", p)
	require.NotNil(t, lock)
	assert.Equal(t, start.Add(time.Minute).UnixMicro(), lock.win, "end of the lockout")
	assert.EqualValues(t, 1, lock.cur, "strikes")
	assert.Equal(t, start.UnixMicro(), lock.last, "the offence")
	assert.Equal(t, start.Add(time.Hour).UnixMicro(), lock.expires, "the strikes' memory")
	assert.Equal(t, 2, s.Len())

	before, beforeState := *lock, *lookup(s, "k", p)
	d = mustTake(t, s, "k", p, 1, start.Add(30*time.Second))
	require.True(t, d.LockedOut)
	assert.Equal(t, 30*time.Second, d.RetryAfter)
	assert.Equal(t, before, *lockEntry(s, "k", p), "the lockout during the lockout")
	assert.Equal(t, beforeState, *lookup(s, "k", p), "the algorithm's state during the lockout")

	require.NoError(t, s.Reset(context.Background(), "k", p))
	assert.Zero(t, s.Len(), "Reset removes the state and the lockout")
	d = mustTake(t, s, "k", p, 1, start.Add(30*time.Second))
	assert.True(t, d.Allowed)
}

// TestLockoutSwept: the janitor keeps a lockout entry while its strikes
// matter, and deletes it after.
func TestLockoutSwept(t *testing.T) {
	s := testStore(t, WithShards(1))
	p := lockoutPolicy()
	start := t0.Truncate(time.Second)
	mustTake(t, s, "k", p, 1, start)
	mustTake(t, s, "k", p, 1, start)
	s.sweep(start.Add(30 * time.Minute))
	require.Equal(t, 1, s.Len(), "the state is gone, the strikes are kept")
	require.NotNil(t, lockEntry(s, "k", p))
	s.sweep(start.Add(time.Hour))
	require.Zero(t, s.Len(), "the strikes forgotten")
}

// TestLockoutSurvivesAFlood: a flood of new keys into a full store evicts
// other states before a lockout in force.
func TestLockoutSurvivesAFlood(t *testing.T) {
	s := testStore(t, WithShards(1), WithMaxKeys(evictSample))
	p := lockoutPolicy()
	start := t0.Truncate(time.Hour)
	mustTake(t, s, "attacker", p, 1, start)
	mustTake(t, s, "attacker", p, 1, start)
	plain := core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 5, Window: time.Hour}
	for i := range 10 * evictSample {
		mustTake(t, s, fmt.Sprint("flood-", i), plain, 1, start.Add(time.Duration(i)*time.Microsecond))
		require.NotNil(t, lockEntry(s, "attacker", p), "flood key %d evicted the lockout", i)
	}
	d := mustTake(t, s, "attacker", p, 1, start.Add(time.Second))
	assert.True(t, d.LockedOut)
}

// TestLockoutInvalid: a request with a Lockout that core.Policy.Validate
// refuses, sent to Take directly, is an error, never a panic.
func TestLockoutInvalid(t *testing.T) {
	s := testStore(t)
	for _, lo := range [][3]time.Duration{ // Lockout, LockoutMax, LockoutMemory
		{-time.Second, 0, 0},
		{math.MaxInt64, 0, 0},
		{time.Hour, time.Minute, 0},
		{time.Hour, math.MaxInt64, 0},
		{time.Hour, 0, math.MinInt64},
		{time.Hour, 0, math.MaxInt64},
		{0, time.Hour, 0},
	} {
		p := lockoutPolicy()
		p.Lockout, p.LockoutMax, p.LockoutMemory = lo[0], lo[1], lo[2]
		_, _, err := TakeOne(s, context.Background(), t0, core.Request{Key: "k", Policy: p, Cost: 1})
		require.ErrorIs(t, err, core.ErrInvalidOption, "%+v", lo)
	}
	p := lockoutPolicy()
	_, _, err := TakeOne(s, context.Background(), t0, core.Request{Key: "k", Policy: p, Cost: 2})
	require.ErrorIs(t, err, core.ErrInvalidOption)
	p.Algorithm = "gcra"
	_, _, err = TakeOne(s, context.Background(), t0, core.Request{Key: "k", Policy: p, Cost: 1})
	require.ErrorIs(t, err, core.ErrInvalidOption)
}
