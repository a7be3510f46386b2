package rediswatch_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/rediswatch"
)

// commandCalls returns how many times Redis ran cmd since CONFIG
// RESETSTAT.
func commandCalls(t *testing.T, raw *redis.Client, cmd string) int {
	t.Helper()
	info, err := raw.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			var n int
			_, err := fmt.Sscanf(rest, "%d", &n)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// TestChangesNeedNoFullLoad checks that neither the server that makes a
// change nor the other reads every ban for it: no MGET (what a full load
// does) runs in Redis while bans are made, made in a batch and lifted,
// each reaching the other server within a second.
func TestChangesNeedNoFullLoad(t *testing.T) {
	srv := redistest.StartWith(t) // of its own: its statistics are reset
	raw := srv.Client()
	fill(t, raw, rediswatch.DefaultPrefix, 2000)
	ctx := context.Background()
	one, _ := open(t, srv.Client())
	two, _ := open(t, srv.Client())
	require.Equal(t, 2000, rediswatch.Len(two))
	require.NoError(t, raw.ConfigResetStat(ctx).Err())

	_, err := one.Ban(ctx, access.Entry{Key: "user:new"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return matches(two, "", "user:new") }, propagation, tick)
	batch := make([]access.Entry, 100)
	for i := range batch {
		batch[i] = access.Entry{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 32), Expires: time.Now().Add(time.Hour)}
	}
	_, err = two.BanMany(ctx, batch)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rediswatch.Len(one) == 2101 && matches(one, "192.0.2.99", "") }, propagation, tick)
	_, err = two.Unban(ctx, benchEntry(1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !matches(one, "", benchEntry(1).Key) }, propagation, tick)
	assert.Equal(t, 2100, rediswatch.Len(one))
	assert.Equal(t, 2100, rediswatch.Len(two))

	assert.Zero(t, commandCalls(t, raw, "mget"), "a change made a server load every ban")
	assert.Positive(t, commandCalls(t, raw, "evalsha"), "the statistics count")
}

func TestBanMany(t *testing.T) {
	srv := redistest.Start(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	one, _ := open(t, srv.Client(), p, rediswatch.WithMax(10))
	two, _ := open(t, srv.Client(), p)

	until := time.Now().Add(time.Hour)
	got, err := one.BanMany(ctx, []access.Entry{
		{Key: "user:1", Reason: "first"},
		{Prefix: netip.MustParsePrefix("::ffff:198.51.100.0/120"), Expires: until},
		{Key: "user:1", Reason: "second", Expires: until},
	})
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, "198.51.100.0/24", got[1].Prefix.String(), "as stored")
	assert.Equal(t, until.Add(time.Millisecond-1).Truncate(time.Millisecond).UnixMilli(), got[1].Expires.UnixMilli())
	e, ok := one.Match(netip.Addr{}, "user:1", time.Now())
	require.True(t, ok, "in force here when BanMany returns")
	assert.Equal(t, "second", e.Reason, "the later entry for a target stands")
	assert.True(t, matches(one, "198.51.100.7", ""))
	require.Eventually(t, func() bool {
		e, ok := two.Match(netip.Addr{}, "user:1", time.Now())
		return ok && e.Reason == "second" && matches(two, "198.51.100.7", "")
	}, propagation, tick)
	assert.Equal(t, 2, rediswatch.Len(two))

	none, err := one.BanMany(ctx, nil)
	require.NoError(t, err)
	assert.Nil(t, none)

	// All or nothing.
	for name, c := range map[string]struct {
		entries []access.Entry
		want    error
		msg     string
	}{
		"invalid": {[]access.Entry{{Key: "user:a"}, {Key: "user:\x00"}}, access.ErrInvalidEntry, "entries[1]"},
		"expired": {[]access.Entry{{Key: "user:a"}, {Key: "user:b", Expires: time.Now().Add(-time.Second)}}, access.ErrInvalidEntry, "entries[1]"},
		"past max": {[]access.Entry{{Key: "user:a"}, {Key: "user:b"}, {Key: "user:c"}, {Key: "user:d"}, {Key: "user:e"},
			{Key: "user:f"}, {Key: "user:g"}, {Key: "user:h"}, {Key: "user:i"}}, access.ErrTooLarge, "over the maximum of 10"},
		"too long": {make([]access.Entry, 1001), access.ErrTooLarge, "more than 1000 in one call"},
	} {
		_, err := one.BanMany(ctx, c.entries)
		require.ErrorIs(t, err, c.want, name)
		assert.Contains(t, err.Error(), c.msg, name)
	}
	// An entry in Redis's past (by Redis's clock, which only Redis checks).
	_, err = one.BanMany(ctx, []access.Entry{{Key: "user:a"}, {Key: "user:b", Expires: time.UnixMilli(1)}})
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	list, err := one.List(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 2, "nothing half-applied")
	assert.False(t, matches(one, "", "user:a"))

	// Nine more fit the ten: the ones held are no more.
	nine := make([]access.Entry, 8)
	for i := range nine {
		nine[i] = access.Entry{Key: fmt.Sprintf("user:n%d", i)}
	}
	_, err = one.BanMany(ctx, append(nine, access.Entry{Key: "user:1"}))
	require.NoError(t, err)
	assert.Equal(t, 10, rediswatch.Len(one))
}

// TestMalformedLog writes broken changes straight into the log: the
// servers refuse them, reload, and stay right; a log key of another type
// is replaced by the next change.
func TestMalformedLog(t *testing.T) {
	srv := redistest.Start(t)
	pre := prefix(t)
	tag := "{" + pre + "}:"
	raw := srv.Client()
	ctx := context.Background()
	one, _ := open(t, srv.Client(), rediswatch.WithKey(pre))
	two, logs := open(t, srv.Client(), rediswatch.WithKey(pre))
	_, err := one.Ban(ctx, access.Entry{Key: "user:1"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return matches(two, "", "user:1") }, propagation, tick)

	v0, err := raw.Get(ctx, tag+"v").Int64()
	require.NoError(t, err)
	v := func(n int64) string { return strconv.FormatInt(v0+n, 10) }
	add := func(fields ...any) {
		require.NoError(t, raw.XAdd(ctx, &redis.XAddArgs{Stream: tag + "l", Values: fields}).Err())
	}
	// Entries that chain, three broken otherwise, and a ban among them that
	// is not in Redis: applied, it would ban user:ghost.
	add("s", v(1), "p", v(0), "o", "b", "i", "k:user:ghost", "v", "v1|0|")
	add("s", v(2), "p", v(1), "o", "x", "i", "k:user:2")
	add("s", v(3), "p", v(2), "o", "b", "i", "k:user:3", "v", strings.Repeat("v", 5000))
	add("s", v(4), "p", v(3), "o", "u", "i", "nokind")
	// A batch that claims a billion bans and holds one: read as what it
	// holds (two more rows, both empty), not looped over.
	add("s", v(5), "p", v(4), "o", "B", "n", "1000000000", "i1", "k:user:ghost2", "v1", "v1|0|")
	require.NoError(t, raw.Set(ctx, tag+"v", v(7), 0).Err())
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "malformed changes in the log") }, propagation, tick)
	assert.Contains(t, logs.String(), "malformed=5")
	// The reload reads Redis as it is: user:1, no ghost.
	require.Eventually(t, func() bool { return rediswatch.Len(two) == 1 }, propagation, tick)
	assert.True(t, matches(two, "", "user:1"))
	assert.False(t, matches(two, "", "user:ghost"))
	assert.False(t, matches(two, "", "user:ghost2"))

	// Changes go on through the log.
	_, err = one.Ban(ctx, access.Entry{Key: "user:5"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return matches(two, "", "user:5") }, propagation, tick)

	// A log that is no stream.
	require.NoError(t, raw.Del(ctx, tag+"l").Err())
	require.NoError(t, raw.Set(ctx, tag+"l", "not a stream", 0).Err())
	_, err = two.Ban(ctx, access.Entry{Key: "user:6"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return matches(one, "", "user:6") }, propagation, tick)
	typ, err := raw.Type(ctx, tag+"l").Result()
	require.NoError(t, err)
	assert.Equal(t, "stream", typ)
	_, err = one.Unban(ctx, access.Entry{Key: "user:6"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !matches(two, "", "user:6") }, propagation, tick)
}

// TestDeltaMaxBans makes a server with a small WithMax follow one with
// a larger: the changes that would take it past its maximum make it
// reload, which keeps the permanent bans, then those that end last.
func TestDeltaMaxBans(t *testing.T) {
	srv := redistest.Start(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	big, _ := open(t, srv.Client(), p)
	small, logs := open(t, srv.Client(), p, rediswatch.WithMax(3))
	_, err := big.BanMany(ctx, []access.Entry{
		{Key: "user:1"},
		{Key: "user:2", Expires: time.Now().Add(time.Hour)},
		{Key: "user:3", Expires: time.Now().Add(2 * time.Hour)},
		{Key: "user:4", Expires: time.Now().Add(3 * time.Hour)},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "more bans in Redis than WithMax") }, propagation, tick)
	require.Eventually(t, func() bool { return rediswatch.Len(small) == 3 }, propagation, tick)
	assert.True(t, matches(small, "", "user:1"))
	assert.False(t, matches(small, "", "user:2"))
	assert.True(t, matches(small, "", "user:4"))
}

// TestConcurrentChanges bans and lifts the same targets from two servers
// at once, four goroutines each: once they are done, both servers hold
// exactly what Redis does.
func TestConcurrentChanges(t *testing.T) {
	srv := redistest.Start(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	one, _ := open(t, srv.Client(), p, rediswatch.WithPollInterval(10*time.Millisecond))
	two, _ := open(t, srv.Client(), p, rediswatch.WithPollInterval(10*time.Millisecond))
	var wg sync.WaitGroup
	for g := range 8 {
		b := one
		if g%2 == 1 {
			b = two
		}
		wg.Go(func() {
			for i := range 60 {
				e := access.Entry{Key: fmt.Sprintf("user:%d", (g*7+i)%10), Reason: fmt.Sprintf("g%d i%d", g, i)}
				var err error
				switch i % 3 {
				case 0, 1:
					_, err = b.Ban(ctx, e, 0)
				default:
					_, err = b.Unban(ctx, e)
				}
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	want, err := one.List(ctx)
	require.NoError(t, err)
	same := func(b *rediswatch.Bans) bool {
		if rediswatch.Len(b) != len(want) {
			return false
		}
		for _, w := range want {
			got, ok := b.Match(netip.Addr{}, w.Key, time.Now())
			if !ok || got.Reason != w.Reason {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool { return same(one) && same(two) }, propagation, tick)
}

// TestUnbanStale lifts a ban that Redis lost alone (its key deleted by
// hand, as an eviction would): Unban reports none in force, and lifts
// this server's copy before it returns.
func TestUnbanStale(t *testing.T) {
	srv := redistest.Start(t)
	pre := prefix(t)
	tag := "{" + pre + "}:"
	raw := srv.Client()
	ctx := context.Background()
	b, _ := open(t, srv.Client(), rediswatch.WithKey(pre), manual)
	_, err := b.Ban(ctx, access.Entry{Key: "user:1"}, 0)
	require.NoError(t, err)
	require.NoError(t, raw.Del(ctx, tag+"b:k:user:1").Err())
	require.NoError(t, raw.ZRem(ctx, tag+"i", "k:user:1").Err())
	require.True(t, matches(b, "", "user:1"))
	lifted, err := b.Unban(ctx, access.Entry{Key: "user:1"})
	require.NoError(t, err)
	assert.False(t, lifted)
	assert.False(t, matches(b, "", "user:1"))
	assert.Zero(t, rediswatch.Len(b))
}
