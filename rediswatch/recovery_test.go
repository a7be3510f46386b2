package rediswatch_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/rediswatch"
)

// manual makes a Bans whose poller does not run within a test: the test
// drives it with Sync, so that which server sees what, and when, is the
// test's choice.
var manual = rediswatch.WithPollInterval(time.Minute)

// lostSet is what the tests of a lost Redis ban, on server one.
type lostSet struct {
	perm, timed, lifted access.Entry // lifted: unbanned just before the loss
	timedEnd            time.Time
}

func banLostSet(t *testing.T, one *rediswatch.Bans) lostSet {
	t.Helper()
	ctx := context.Background()
	s := lostSet{
		perm:   access.Entry{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "permanent"},
		timed:  access.Entry{Key: "user:timed", Reason: "an hour"},
		lifted: access.Entry{Key: "user:lifted", Reason: "lifted"},
	}
	_, err := one.Ban(ctx, s.perm, 0)
	require.NoError(t, err)
	e, err := one.Ban(ctx, s.timed, time.Hour)
	require.NoError(t, err)
	s.timedEnd = e.Expires
	_, err = one.Ban(ctx, s.lifted, 0)
	require.NoError(t, err)
	return s
}

func has(b *rediswatch.Bans, e access.Entry) bool {
	_, ok := b.Match(e.Prefix.Addr(), e.Key, time.Now())
	return ok
}

// inRedis reports which of the bans' keys Redis holds.
func inRedis(t *testing.T, raw *redis.Client, es ...access.Entry) []bool {
	t.Helper()
	out := make([]bool, len(es))
	for i, e := range es {
		id := "k:" + e.Key
		if e.Key == "" {
			id = "p:" + e.Prefix.String()
		}
		n, err := raw.Exists(context.Background(), "{"+rediswatch.DefaultPrefix+"}:b:"+id).Result()
		require.NoError(t, err)
		out[i] = n == 1
	}
	return out
}

// checkRestored checks what Redis and both servers hold once recovered:
// the permanent ban and the timed one, with its original end, and not
// the ban lifted before the loss.
func checkRestored(t *testing.T, raw *redis.Client, s lostSet, servers ...*rediswatch.Bans) {
	t.Helper()
	ctx := context.Background()
	assert.Equal(t, []bool{true, true, false}, inRedis(t, raw, s.perm, s.timed, s.lifted))
	end, err := raw.PExpireTime(ctx, "{"+rediswatch.DefaultPrefix+"}:b:k:user:timed").Result()
	require.NoError(t, err)
	assert.Equal(t, s.timedEnd.UnixMilli(), end.Milliseconds(), "the timed ban keeps its end")
	for i, b := range servers {
		assert.True(t, has(b, s.perm), "server %d", i)
		assert.True(t, has(b, s.timed), "server %d", i)
		assert.False(t, has(b, s.lifted), "server %d", i)
	}
}

// TestLostDataStaleServerFirst flushes Redis just after server one lifts
// a ban and makes another, and lets server two, which has seen neither,
// find Redis empty first: it writes back what it holds, the lifted ban
// included; server one then merges what it knew later, so the lift
// stands and the new ban is written back; nothing else is lifted, and a
// ban that expired meanwhile is not written back.
func TestLostDataStaleServerFirst(t *testing.T) {
	srv := redistest.StartWith(t) // of its own: it is flushed
	raw := srv.Client()
	ctx := context.Background()
	one, logs1 := open(t, srv.Client(), manual)
	two, logs2 := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	short, err := one.Ban(ctx, access.Entry{Key: "user:short"}, 300*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, two.Sync(ctx))
	for _, e := range []access.Entry{s.perm, s.timed, s.lifted, short} {
		require.True(t, has(two, e))
	}

	// Just before the loss, server one lifts a ban and makes another;
	// server two has seen neither.
	_, err = one.Unban(ctx, s.lifted)
	require.NoError(t, err)
	late, err := one.Ban(ctx, access.Entry{Key: "user:late"}, 0)
	require.NoError(t, err)
	require.NoError(t, raw.FlushDB(ctx).Err())
	require.Eventually(t, func() bool { return time.Now().After(short.Expires) }, testwait.D(5*time.Second), tick)

	require.NoError(t, two.Sync(ctx))
	assert.Contains(t, logs2.String(), "Redis lost the bans (their marker key is gone)")
	assert.Equal(t, []bool{true, true, true, false, false}, inRedis(t, raw, s.perm, s.timed, s.lifted, late, short),
		"server two wrote back what it held, not the expired ban")

	require.NoError(t, one.Sync(ctx))
	assert.Contains(t, logs1.String(), "another server wrote them back; merged")
	assert.False(t, has(one, s.lifted), "the lift stands on the server that made it")
	assert.True(t, has(one, late))
	require.NoError(t, two.Sync(ctx))
	checkRestored(t, raw, s, one, two)
	assert.True(t, has(two, late))
	assert.Equal(t, []bool{true}, inRedis(t, raw, late))
	list, err := two.List(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 3)

	// The set goes on as before.
	_, err = two.Unban(ctx, s.perm)
	require.NoError(t, err)
	require.NoError(t, one.Sync(ctx))
	assert.False(t, has(one, s.perm))
}

// TestLostDataCurrentServerFirst is the other order: the server that
// lifted a ban writes back first, and the stale one, which still holds
// the ban, merges without bringing it back, while a ban it made just
// before the loss, which the first had not seen, is written back.
func TestLostDataCurrentServerFirst(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), manual)
	two, _ := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	require.NoError(t, two.Sync(ctx))
	require.True(t, has(two, s.lifted))

	_, err := one.Unban(ctx, s.lifted)
	require.NoError(t, err)
	fromTwo, err := two.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("2001:db8::/48")}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, raw.FlushDB(ctx).Err())

	require.NoError(t, one.Sync(ctx))
	assert.Equal(t, []bool{true, true, false, false}, inRedis(t, raw, s.perm, s.timed, s.lifted, fromTwo))
	require.NoError(t, two.Sync(ctx))
	require.NoError(t, one.Sync(ctx))
	checkRestored(t, raw, s, one, two)
	assert.Equal(t, []bool{true}, inRedis(t, raw, fromTwo))
	assert.True(t, has(one, fromTwo))
	assert.True(t, has(two, fromTwo))
}

// TestLostDataRestart kills Redis (no persistence) and restarts it empty
// on the same port just after an Unban, with both servers polling: while
// it recovers, neither server ever lifts a ban it held, and the one that
// lifted the ban never brings it back, whichever writes back first.
func TestLostDataRestart(t *testing.T) {
	srv := redistest.StartWith(t)
	ctx := context.Background()
	client := func() *redis.Client {
		o := srv.Options()
		o.MaxRetries = -1
		o.DialTimeout = 200 * time.Millisecond
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	one, _ := open(t, client())
	two, _ := open(t, client())
	s := banLostSet(t, one)
	require.Eventually(t, func() bool { return has(two, s.perm) && has(two, s.timed) && has(two, s.lifted) }, propagation, tick)

	_, err := one.Unban(ctx, s.lifted)
	require.NoError(t, err)
	srv.Kill()
	srv.Restart()
	raw := srv.Client()
	// Checked at every tick, in the test's goroutine, until recovered.
	for deadline := testwait.Deadline(10 * time.Second); ; {
		require.True(t, has(one, s.perm) && has(one, s.timed) && has(two, s.perm) && has(two, s.timed), "a ban was lifted")
		require.False(t, has(one, s.lifted), "the lift was undone on the server that made it")
		if in := inRedis(t, raw, s.perm, s.timed, s.lifted); in[0] && in[1] && !in[2] && !has(two, s.lifted) {
			break
		}
		require.False(t, time.Now().After(deadline), "not recovered within 10 s")
		time.Sleep(tick)
	}
	checkRestored(t, raw, s, one, two)

	// New bans work and reach the other server again.
	_, err = two.Ban(ctx, access.Entry{Key: "user:after"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return matches(one, "", "user:after") }, propagation, tick)
}

// TestLostDataWriteFirst flushes Redis and bans, then unbans, before any
// poll: each write puts the bans back first, so neither lifts the others.
func TestLostDataWriteFirst(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), manual)
	two, _ := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	require.NoError(t, two.Sync(ctx))

	require.NoError(t, raw.FlushDB(ctx).Err())
	_, err := one.Ban(ctx, access.Entry{Key: "user:new"}, 0)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true, true, true}, inRedis(t, raw, s.perm, s.timed, s.lifted, access.Entry{Key: "user:new"}))

	require.NoError(t, raw.FlushDB(ctx).Err())
	lifted, err := two.Unban(ctx, s.lifted)
	require.NoError(t, err)
	assert.True(t, lifted, "written back, then lifted")
	assert.False(t, has(two, s.lifted))
	// Server one, which still holds the lifted ban, merges and takes the lift.
	require.NoError(t, one.Sync(ctx))
	require.NoError(t, two.Sync(ctx))
	checkRestored(t, raw, s, one, two)
	assert.True(t, matches(one, "", "user:new"))
	assert.True(t, matches(two, "", "user:new"), "a change the writer-back had not seen is merged")
}

// TestLostMarkerOnly deletes the marker but not the bans, as an operator
// might: a server that has not seen the last Unban sets the marker again
// without writing anything back.
func TestLostMarkerOnly(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), manual)
	two, logs := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	require.NoError(t, two.Sync(ctx))
	_, err := one.Unban(ctx, s.lifted)
	require.NoError(t, err)

	require.NoError(t, raw.Del(ctx, "{"+rediswatch.DefaultPrefix+"}:m").Err())
	require.NoError(t, two.Sync(ctx))
	assert.Contains(t, logs.String(), "set the marker again")
	require.NoError(t, one.Sync(ctx))
	checkRestored(t, raw, s, one, two)
}

// TestLostDataTooLate lets the recovery journal end before the stale
// server sees the loss: it merges nothing, logs it, and takes what Redis
// holds.
func TestLostDataTooLate(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), manual)
	two, logs := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	require.NoError(t, two.Sync(ctx))
	_, err := one.Unban(ctx, s.lifted)
	require.NoError(t, err)
	require.NoError(t, raw.FlushDB(ctx).Err())
	require.NoError(t, one.Sync(ctx))
	journal := "{" + rediswatch.DefaultPrefix + "}:j"
	ttl, err := raw.PTTL(ctx, journal).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 9*time.Minute, "the recovery journal lives ten minutes")
	assert.LessOrEqual(t, ttl, 10*time.Minute)

	require.NoError(t, raw.Del(ctx, journal).Err()) // as if ten minutes had passed
	require.NoError(t, two.Sync(ctx))
	assert.Contains(t, logs.String(), "too late to merge")
	checkRestored(t, raw, s, one, two)
	assert.False(t, strings.Contains(logs.String(), "level=ERROR"))
}

// TestLostDataNewServerFirst starts a server on a Redis that just lost
// its data, before the running ones notice: it finds no marker and sets
// it, knowing no ban; the running servers then write theirs back, those
// they know from their first load too (which their journals do not
// hold), and the new one takes them.
func TestLostDataNewServerFirst(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	zero, _ := open(t, srv.Client(), manual)
	s := banLostSet(t, zero)
	one, _ := open(t, srv.Client(), manual)
	two, _ := open(t, srv.Client(), manual)
	require.NoError(t, zero.Close())
	_, err := one.Unban(ctx, s.lifted)
	require.NoError(t, err)
	require.NoError(t, raw.FlushDB(ctx).Err())

	three, _ := open(t, srv.Client(), manual)
	assert.Zero(t, rediswatch.Len(three))
	require.NoError(t, two.Sync(ctx)) // stale: still holds the lifted ban
	require.NoError(t, one.Sync(ctx))
	require.NoError(t, two.Sync(ctx))
	require.NoError(t, three.Sync(ctx))
	checkRestored(t, raw, s, one, two, three)
}

// TestLostDataFreshServerFirst lets a server that started after a ban
// was lifted, and so never saw it, write back first: the lift is in the
// version it knows, so a stale server's older ban of the target is not
// brought back.
func TestLostDataFreshServerFirst(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), manual)
	two, _ := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	require.NoError(t, two.Sync(ctx))
	_, err := one.Unban(ctx, s.lifted)
	require.NoError(t, err)
	three, _ := open(t, srv.Client(), manual) // loads after the lift
	require.False(t, has(three, s.lifted))
	require.NoError(t, raw.FlushDB(ctx).Err())

	require.NoError(t, three.Sync(ctx))
	require.NoError(t, two.Sync(ctx))
	assert.Equal(t, []bool{true, true, false}, inRedis(t, raw, s.perm, s.timed, s.lifted),
		"the stale server brought back a ban lifted before the version the writer-back knew")
	assert.False(t, has(two, s.lifted))
	require.NoError(t, one.Sync(ctx))
	require.NoError(t, two.Sync(ctx))
	require.NoError(t, three.Sync(ctx))
	checkRestored(t, raw, s, one, two, three)
}

// TestLostDataWaitsForTheWriter: while another server holds the lease of
// a write-back (its pages under way), a server that finds the marker
// gone neither sets it nor writes over it: its Sync and its Ban wait for
// the write-back to end (here until their deadline), and Redis stays as
// the writer leaves it. Once the lease is gone (the writer stopped, its
// lease ran out), the next server takes the write-back over.
func TestLostDataWaitsForTheWriter(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), manual)
	s := banLostSet(t, one)
	require.NoError(t, raw.FlushDB(ctx).Err())
	lease := "{" + rediswatch.DefaultPrefix + "}:w"
	require.NoError(t, raw.Set(ctx, lease, "another server", time.Hour).Err())

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, one.Sync(short), context.DeadlineExceeded, "Sync waits for the writer")
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := one.Ban(short, access.Entry{Key: "user:during"}, 0)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Ban waits for the writer")
	n, err := raw.Exists(ctx, "{"+rediswatch.DefaultPrefix+"}:m").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no marker while another server writes back")
	assert.Equal(t, []bool{false, false, false}, inRedis(t, raw, s.perm, s.timed, s.lifted), "nothing written over the writer's pages")
	assert.True(t, has(one, s.perm), "the bans held stay in force meanwhile")

	require.NoError(t, raw.Del(ctx, lease).Err())
	require.NoError(t, one.Sync(ctx))
	assert.Equal(t, []bool{true, true, true}, inRedis(t, raw, s.perm, s.timed, s.lifted))
	_, err = one.Ban(ctx, access.Entry{Key: "user:after"}, 0)
	require.NoError(t, err)
}
