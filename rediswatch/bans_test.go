package rediswatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/rediswatch"
)

// propagation is the bound the issue sets: a ban made on one server stops
// a client on another within it.
var propagation = testwait.D(time.Second)

// tick is how often a test polls for a condition.
const tick = 10 * time.Millisecond

// syncBuffer is a log or output destination one goroutine writes while
// another reads it.
type syncBuffer = syncbuf.Buffer

// prefix returns a prefix of the test's own, so that tests sharing a
// REDIS_URL server share no bans.
func prefix(t *testing.T) string {
	return "test:" + strings.ReplaceAll(t.Name(), "/", ":") + fmt.Sprintf(":%d", time.Now().UnixNano())
}

// open returns a Bans, closed when the test ends, and its log.
func open(t *testing.T, c redis.UniversalClient, opts ...rediswatch.Option) (*rediswatch.Bans, *syncBuffer) {
	t.Helper()
	logs := new(syncBuffer)
	opts = append([]rediswatch.Option{rediswatch.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	b, err := rediswatch.NewBans(context.Background(), c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })
	return b, logs
}

func matches(b *rediswatch.Bans, a, key string) bool {
	var ad netip.Addr
	if a != "" {
		ad = netip.MustParseAddr(a)
	}
	_, ok := b.Match(ad, key, time.Now())
	return ok
}

func TestPropagation(t *testing.T) {
	srv := redistest.Start(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	// Two "servers", each with a client of its own.
	one, _ := open(t, srv.Client(), p)
	two, _ := open(t, srv.Client(), p)

	e, err := one.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "scanner"}, time.Hour)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(time.Hour), e.Expires, 5*time.Second)
	_, err = one.Ban(ctx, access.Entry{Key: "user:42", Reason: "abuse"}, 0)
	require.NoError(t, err)
	_, err = one.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("::ffff:198.51.100.7/128"), Expires: time.Now().Add(time.Hour)}, 0)
	require.NoError(t, err)

	// In force on the server that banned as soon as Ban returns ...
	assert.True(t, matches(one, "203.0.113.9", ""))
	assert.True(t, matches(one, "", "user:42"))
	assert.True(t, matches(one, "198.51.100.7", ""))
	// ... and on the other within a second.
	require.Eventually(t, func() bool {
		return matches(two, "203.0.113.9", "") && matches(two, "", "user:42") && matches(two, "::ffff:198.51.100.7", "")
	}, propagation, tick)
	got, ok := two.Match(netip.MustParseAddr("203.0.113.9"), "", time.Now())
	require.True(t, ok)
	assert.Equal(t, "scanner", got.Reason)
	assert.False(t, matches(two, "203.0.114.1", "user:43"))

	list, err := two.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 3)
	assert.Equal(t, "198.51.100.7/32", list[0].Prefix.String())
	assert.Equal(t, "203.0.113.0/24", list[1].Prefix.String())
	assert.Equal(t, "user:42", list[2].Key)
	assert.True(t, list[2].Expires.IsZero())
	assert.Equal(t, "abuse", list[2].Reason)

	// Unban, likewise.
	lifted, err := two.Unban(ctx, access.Entry{Key: "user:42"})
	require.NoError(t, err)
	assert.True(t, lifted)
	assert.False(t, matches(two, "", "user:42"))
	require.Eventually(t, func() bool { return !matches(one, "", "user:42") }, propagation, tick)
	assert.True(t, matches(one, "203.0.113.9", ""), "the other bans stay")
	lifted, err = one.Unban(ctx, access.Entry{Key: "user:42"})
	require.NoError(t, err)
	assert.False(t, lifted, "not banned any more")

	// A ban of a banned target replaces it.
	_, err = two.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "for good"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, ok := one.Match(netip.MustParseAddr("203.0.113.9"), "", time.Now())
		return ok && e.Reason == "for good" && e.Expires.IsZero()
	}, propagation, tick)
	list, err = one.List(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 2)
}

func TestExpiryByTTL(t *testing.T) {
	srv := redistest.Start(t)
	prefix := prefix(t)
	p := rediswatch.WithKey(prefix)
	ctx := context.Background()
	one, _ := open(t, srv.Client(), p)
	two, _ := open(t, srv.Client(), p)
	raw := srv.Client()

	const ttl = 300 * time.Millisecond
	short, err := one.Ban(ctx, access.Entry{Key: "user:1", Reason: "short"}, ttl)
	require.NoError(t, err)
	_, err = one.Ban(ctx, access.Entry{Key: "user:2", Reason: "long"}, 0)
	require.NoError(t, err)
	// Expiry is a TTL on the ban's own key, none on a permanent ban.
	pttl, err := raw.PTTL(ctx, "{"+prefix+"}:b:k:user:1").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, time.Duration(0))
	assert.LessOrEqual(t, pttl, ttl)
	pttl, err = raw.PTTL(ctx, "{"+prefix+"}:b:k:user:2").Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), pttl, "no TTL")

	require.Eventually(t, func() bool { return matches(two, "", "user:1") }, propagation, tick)
	// The ban ends at its instant (by this machine's clock, which is
	// Redis's here) ...
	_, ok := two.Match(netip.Addr{}, "user:1", short.Expires.Add(-time.Millisecond))
	assert.True(t, ok)
	_, ok = two.Match(netip.Addr{}, "user:1", short.Expires)
	assert.False(t, ok)
	// ... Redis drops its key, the servers their copy, and List omits it.
	require.Eventually(t, func() bool {
		n, err := raw.Exists(ctx, "{"+prefix+"}:b:k:user:1").Result()
		return err == nil && n == 0
	}, ttl+propagation, tick)
	require.Eventually(t, func() bool { return rediswatch.Len(one) == 1 && rediswatch.Len(two) == 1 }, propagation, tick)
	assert.False(t, matches(one, "", "user:1"))
	assert.True(t, matches(one, "", "user:2"))
	list, err := two.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "user:2", list[0].Key)
}

func TestRestartLoadsBans(t *testing.T) {
	srv := redistest.Start(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	first, err := rediswatch.NewBans(context.Background(), srv.Client(), p)
	require.NoError(t, err)
	_, err = first.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("2001:db8::/32")}, time.Hour)
	require.NoError(t, err)
	_, err = first.Ban(ctx, access.Entry{Key: "key:9f86d081884c7d659a2feaa0c55ad015"}, 0)
	require.NoError(t, err)
	require.NoError(t, first.Close())
	require.NoError(t, first.Close(), "Close twice")

	// A server that starts afterwards enforces them as soon as New returns.
	again, _ := open(t, srv.Client(), p)
	assert.True(t, matches(again, "2001:db8::1", ""))
	assert.True(t, matches(again, "", "key:9f86d081884c7d659a2feaa0c55ad015"))
	assert.Equal(t, 2, rediswatch.Len(again))

	// Another prefix shares nothing.
	other, _ := open(t, srv.Client(), rediswatch.WithKey(prefix(t)+":other"))
	assert.Zero(t, rediswatch.Len(other))
}

func TestOutageKeepsSnapshot(t *testing.T) {
	srv := redistest.StartWith(t) // of its own: it freezes and kills it
	opts := srv.Options()
	opts.ReadTimeout = 100 * time.Millisecond
	opts.WriteTimeout = 100 * time.Millisecond
	opts.DialTimeout = 100 * time.Millisecond
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b, logs := open(t, c)
	other, _ := open(t, srv.Client())

	_, err := b.Ban(ctx, access.Entry{Key: "user:1", Reason: "permanent"}, 0)
	require.NoError(t, err)
	short, err := b.Ban(ctx, access.Entry{Key: "user:2"}, 500*time.Millisecond)
	require.NoError(t, err)

	srv.Freeze()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cannot read the bans from Redis") }, testwait.D(5*time.Second), tick)
	assert.True(t, matches(b, "", "user:1"), "the last snapshot stays")
	_, ok := b.Match(netip.Addr{}, "user:2", short.Expires.Add(-time.Millisecond))
	assert.True(t, ok)
	// Local expiry goes on: user:2's ban ends, and is dropped, without Redis.
	require.Eventually(t, func() bool { return rediswatch.Len(b) == 1 }, testwait.D(5*time.Second), tick)
	assert.False(t, matches(b, "", "user:2"))
	_, err = b.Ban(ctx, access.Entry{Key: "user:3"}, 0)
	require.Error(t, err, "a ban needs Redis")
	assert.Equal(t, 1, strings.Count(logs.String(), "cannot read the bans"), "the outage is logged once")

	srv.Thaw()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "reading the bans from Redis again") }, testwait.D(5*time.Second), tick)
	_, err = other.Ban(ctx, access.Entry{Key: "user:4"}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return matches(b, "", "user:4") }, propagation, tick)

	// A Redis that dies and comes back empty: the snapshot stays while it
	// is away, then the bans are written back (TestLostData has more).
	srv.Kill()
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "cannot read the bans") == 2 }, testwait.D(5*time.Second), tick)
	assert.True(t, matches(b, "", "user:1"))
	srv.Restart()
	raw := srv.Client()
	require.Eventually(t, func() bool {
		n, err := raw.Exists(ctx, "{"+rediswatch.DefaultPrefix+"}:b:k:user:1", "{"+rediswatch.DefaultPrefix+"}:b:k:user:4").Result()
		return err == nil && n == 2
	}, testwait.D(5*time.Second), tick)
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "reading the bans from Redis again") == 2 }, testwait.D(5*time.Second), tick)
	assert.True(t, matches(b, "", "user:1"))
	assert.True(t, matches(other, "", "user:4"))
	_, err = b.Ban(ctx, access.Entry{Key: "user:5"}, 0)
	require.NoError(t, err)
	assert.True(t, matches(b, "", "user:5"))
	require.Eventually(t, func() bool { return matches(other, "", "user:5") }, propagation, tick)
	assert.Equal(t, 3, rediswatch.Len(b))
}

func TestMalformedSkipped(t *testing.T) {
	srv := redistest.Start(t)
	prefix := prefix(t)
	raw := srv.Client()
	ctx := context.Background()
	tag := "{" + prefix + "}:"
	bad := map[string]string{
		"x:10.0.0.1/32":                    "v1|0|unknown kind",
		"nokind":                           "v1|0|no kind",
		"p:10.0.0.1/8":                     "v1|0|host bits",
		"p:10.0.0.0/33":                    "v1|0|bad range",
		"p:fe80::1%eth0/128":               "v1|0|zone",
		"k:":                               "v1|0|empty key",
		"k:user:\x01":                      "v1|0|control in key",
		"k:user:a":                         "garbage",
		"k:user:b":                         "v2|0|future format",
		"k:user:c":                         "v1|soon|bad time",
		"k:user:d":                         "v1|-5|negative",
		"k:user:e":                         "v1|0|control \x1b[31m in reason",
		"k:user:f":                         "v1|0|" + strings.Repeat("r", 1024+1),
		"k:user:g":                         "v1|99999999999999999999|overflow",
		"k:" + strings.Repeat("k", 1024+1): "v1|0|long key",
	}
	good := map[string]string{
		"p:192.0.2.0/24": "v1|0|by hand",
		"k:user:ok":      "v1|0|",
	}
	for id, v := range bad {
		require.NoError(t, raw.Set(ctx, tag+"b:"+id, v, 0).Err())
		require.NoError(t, raw.ZAdd(ctx, tag+"i", redis.Z{Score: 1e18, Member: id}).Err())
	}
	for id, v := range good {
		require.NoError(t, raw.Set(ctx, tag+"b:"+id, v, 0).Err())
		require.NoError(t, raw.ZAdd(ctx, tag+"i", redis.Z{Score: 1e18, Member: id}).Err())
	}
	// An id in the index whose key is gone is no ban, and no error.
	require.NoError(t, raw.ZAdd(ctx, tag+"i", redis.Z{Score: 1e18, Member: "k:user:gone"}).Err())

	b, logs := open(t, raw, rediswatch.WithKey(prefix))
	assert.Equal(t, 2, rediswatch.Len(b))
	assert.True(t, matches(b, "192.0.2.1", ""))
	assert.True(t, matches(b, "", "user:ok"))
	assert.False(t, matches(b, "10.0.0.1", "user:a"))
	assert.Contains(t, logs.String(), "skipped malformed bans")
	assert.Contains(t, logs.String(), fmt.Sprintf("skipped=%d", len(bad)))
	list, err := b.List(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 2)

	// A malformed value written later, with a version bump, is skipped too.
	require.NoError(t, raw.Set(ctx, tag+"b:p:192.0.2.0/24", "v1|x|", 0).Err())
	require.NoError(t, raw.Set(ctx, tag+"v", "1", 0).Err())
	require.Eventually(t, func() bool { return rediswatch.Len(b) == 1 }, propagation, tick)
	assert.False(t, matches(b, "192.0.2.1", ""))
}

func TestMaxBans(t *testing.T) {
	srv := redistest.Start(t)
	prefix := prefix(t)
	ctx := context.Background()
	b, _ := open(t, srv.Client(), rediswatch.WithKey(prefix), rediswatch.WithMax(2))
	_, err := b.Ban(ctx, access.Entry{Key: "user:1"}, 0)
	require.NoError(t, err)
	_, err = b.Ban(ctx, access.Entry{Key: "user:2"}, time.Hour)
	require.NoError(t, err)
	_, err = b.Ban(ctx, access.Entry{Key: "user:3"}, 0)
	require.ErrorIs(t, err, access.ErrTooLarge)
	_, err = b.Ban(ctx, access.Entry{Key: "user:2", Reason: "replaced"}, 0)
	require.NoError(t, err, "replacing is not one more")

	// A server with a smaller maximum loads the permanent bans first.
	big, _ := open(t, srv.Client(), rediswatch.WithKey(prefix))
	_, err = big.Ban(ctx, access.Entry{Key: "user:3"}, time.Hour)
	require.NoError(t, err)
	small, logs := open(t, srv.Client(), rediswatch.WithKey(prefix), rediswatch.WithMax(2))
	assert.Equal(t, 2, rediswatch.Len(small))
	assert.True(t, matches(small, "", "user:1"))
	assert.True(t, matches(small, "", "user:2"))
	assert.False(t, matches(small, "", "user:3"))
	assert.Contains(t, logs.String(), "more bans in Redis than WithMax")
}

func TestRejects(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	for _, o := range []rediswatch.Option{
		nil,
		rediswatch.WithKey(""),
		rediswatch.WithKey("a{b"),
		rediswatch.WithKey("a}b"),
		rediswatch.WithKey("a\nb"),
		rediswatch.WithKey(strings.Repeat("p", 257)),
		rediswatch.WithPollInterval(time.Millisecond),
		rediswatch.WithPollInterval(time.Hour),
		rediswatch.WithResyncInterval(0),
		rediswatch.WithMax(0),
		rediswatch.WithMax(1_000_001),
		rediswatch.WithLogger(nil),
	} {
		b, err := rediswatch.NewBans(context.Background(), c, o)
		assert.Nil(t, b)
		require.ErrorIs(t, err, core.ErrInvalidOption)
	}
	b, err := rediswatch.NewBans(context.Background(), nil)
	assert.Nil(t, b)
	require.ErrorIs(t, err, core.ErrInvalidOption)
	var nilClient *redis.Client
	_, err = rediswatch.NewBans(context.Background(), nilClient)
	require.ErrorIs(t, err, core.ErrInvalidOption)

	bans, _ := open(t, c, rediswatch.WithKey(prefix(t)))
	for name, e := range map[string]access.Entry{
		"neither":     {Reason: "x"},
		"both":        {Prefix: netip.MustParsePrefix("10.0.0.0/8"), Key: "user:1"},
		"bad range":   {Prefix: netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 40)},
		"control":     {Key: "user:\x00"},
		"long reason": {Key: "user:1", Reason: strings.Repeat("r", 1024+1)},
		"expired":     {Key: "user:1", Expires: time.Now().Add(-time.Second)},
		"long ago":    {Key: "user:1", Expires: time.Unix(0, 0)},
		"before 1970": {Key: "user:1", Expires: time.Unix(-100, 0)},
	} {
		_, err := bans.Ban(ctx, e, 0)
		require.ErrorIs(t, err, access.ErrInvalidEntry, name)
	}
	_, err = bans.Ban(ctx, access.Entry{Key: "user:1"}, -time.Millisecond)
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	_, err = bans.Unban(ctx, access.Entry{})
	require.ErrorIs(t, err, access.ErrInvalidEntry)
	list, err := bans.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, list, "nothing half-applied")

	// A Redis that cannot be reached fails NewBans, bounded by its ctx.
	dead := redistest.StartWith(t)
	dc := dead.Client()
	dead.Kill()
	start := time.Now()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	b, err = rediswatch.NewBans(short, dc)
	assert.Nil(t, b)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestMatchDoesNotAllocate(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	b, _ := open(t, srv.Client(), rediswatch.WithKey(prefix(t)))
	_, err := b.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8")}, 0)
	require.NoError(t, err)
	_, err = b.Ban(ctx, access.Entry{Key: "user:1"}, 0)
	require.NoError(t, err)
	hit, miss := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:db8::1")
	now := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		b.Match(hit, "", now)
		b.Match(miss, "user:1", now)
		b.Match(miss, "user:2", now)
	})
	assert.Zero(t, allocs)
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	one, _ := open(t, cl.Client(), p)
	two, _ := open(t, cl.Client(), p)
	for i := range 50 {
		_, err := one.Ban(ctx, access.Entry{Key: fmt.Sprintf("user:%d", i)}, time.Hour)
		require.NoError(t, err)
	}
	_, err := one.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("198.51.100.0/24")}, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return rediswatch.Len(two) == 51 && matches(two, "198.51.100.1", "user:49") }, propagation, tick)
	lifted, err := two.Unban(ctx, access.Entry{Key: "user:7"})
	require.NoError(t, err)
	assert.True(t, lifted)
	require.Eventually(t, func() bool { return !matches(one, "", "user:7") }, propagation, tick)
	list, err := one.List(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 50)
}

func BenchmarkMatch(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	bans, err := rediswatch.NewBans(context.Background(), srv.Client(), rediswatch.WithKey("bench:"+fmt.Sprint(time.Now().UnixNano())), quiet)
	require.NoError(b, err)
	b.Cleanup(func() { _ = bans.Close() })
	_, err = bans.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8")}, 0)
	require.NoError(b, err)
	hit := netip.MustParseAddr("10.1.2.3")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		bans.Match(hit, "user:1", now)
	}
}

func TestClockSkew(t *testing.T) {
	srv := redistest.Start(t)
	p := rediswatch.WithKey(prefix(t))
	ctx := context.Background()
	fair, _ := open(t, srv.Client(), p)
	// A server whose clock runs 10 s ahead of Redis's (this machine's).
	const skew = 10 * time.Second
	ahead := func() time.Time { return time.Now().Add(skew) }
	fast, _ := open(t, srv.Client(), p, rediswatch.WithClock(ahead))

	e, err := fair.Ban(ctx, access.Entry{Key: "user:1"}, time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok := fast.Match(netip.Addr{}, "user:1", ahead())
		return ok
	}, propagation, tick)
	// The fast server ends the ban when Redis does, at its own clock's
	// reading of that instant, not 10 s early.
	got, ok := fast.Match(netip.Addr{}, "user:1", e.Expires.Add(skew-time.Second))
	assert.True(t, ok)
	assert.WithinDuration(t, e.Expires.Add(skew), got.Expires, time.Second)
	_, ok = fast.Match(netip.Addr{}, "user:1", e.Expires.Add(skew+time.Second))
	assert.False(t, ok)
	// List gives Redis's clock everywhere.
	list, err := fast.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.True(t, e.Expires.Equal(list[0].Expires))
}

// BenchmarkSync is one full load of 100,000 bans (half ranges, half
// keys), as every server makes every resync interval, or when it falls
// too far behind the log.
func BenchmarkSync(b *testing.B) {
	srv, prefix := benchSetup(b)
	bans := benchOpen(b, benchClient(b, srv), prefix)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		require.NoError(b, rediswatch.Reload(ctx, bans))
	}
}
