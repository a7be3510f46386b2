package rediswatch

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/overrides"
)

// TestScriptsAreThoseOfThePackagesBefore pins the scripts' SHA-1s to those
// of access/redisbans and overrides/redisoverrides before the merge
// (commit 08a4fef): a server running the old packages and one running
// rediswatch run the very same scripts on the same keys, so that they
// share bans and overrides. A change of a script must keep the old
// servers' data readable, and then update this list. load.lua and
// restore.lua changed when loads and writing back went in pages (the
// layout is the same, plus the lease key while a server writes back): an
// old server and a new one still read each other's bans, and one that
// finds the marker gone writes back as it always did.
func TestScriptsAreThoseOfThePackagesBefore(t *testing.T) {
	for name, tc := range map[string]struct {
		script *redis.Script
		sha    string
	}{
		"ban.lua":               {banScript, "7c8f66eedba6a8e602eab1309f6dfee8e93c7e5c"},
		"unban.lua":             {unbanScript, "85b81e1cda914e6598d2fa6518cd6366adccb29b"},
		"load.lua":              {loadScript, "2c7e0c0d4ee8f5aa00f17991b6d335870e531363"},
		"page.lua":              {pageScript, "0d2647377bcae8ff241e184bd12e8b733dedb7e4"},
		"poll.lua":              {pollScript, "c4c7b2933f1a7c172717dc104f4721bde1f4f9b5"},
		"restore_claim.lua":     {claimScript, "ec9018439a20083f586cfbe718673b1943d86074"},
		"restore.lua":           {restoreScript, "01e2494549b21696217af5612d5fb696fcbb5282"},
		"restore_done.lua":      {doneScript, "e9810f2863117811ce93b28a63a05f137856c911"},
		"overrides_read.lua":    {readScript, "fa0f0c8d97b3a90741dc6552b3785a6a18dd9c02"},
		"overrides_restore.lua": {overridesRestoreScript, "b61be29e9d43343dd38606d8d0d47c4d01a5e281"},
		"overrides_write.lua":   {writeScript, "db874cd5f81fd3f7edfcd0f1a1f3ed3efde11ee4"},
	} {
		assert.Equal(t, tc.sha, tc.script.Hash(), name)
	}
}

// TestBansReadAndWriteTheOldLayout: with the default key, a Bans reads
// bans laid out as redisbans wrote them (written here with raw commands,
// as the layout is documented, not through this package), and what it
// writes is in that layout, where an old server reads it.
func TestBansReadAndWriteTheOldLayout(t *testing.T) {
	srv := redistest.StartWith(t) // a Redis of its own: the default keys
	raw := srv.Client()
	ctx := context.Background()

	// An old server's state: a marker, a permanent key ban and a range
	// ban for an hour, in the index, at version 5.
	until := time.Now().Add(time.Hour).UnixMilli()
	require.NoError(t, raw.HSet(ctx, "{ratelimit:bans}:m", "e", "1", "r", "0").Err())
	require.NoError(t, raw.Set(ctx, "{ratelimit:bans}:v", "5", 0).Err())
	require.NoError(t, raw.Set(ctx, "{ratelimit:bans}:b:k:user:42", "v1|0|chargeback", 0).Err())
	require.NoError(t, raw.Set(ctx, "{ratelimit:bans}:b:p:198.51.100.0/24", "v1|"+strconv.FormatInt(until, 10)+"|scanner", 0).Err())
	require.NoError(t, raw.PExpireAt(ctx, "{ratelimit:bans}:b:p:198.51.100.0/24", time.UnixMilli(until)).Err())
	require.NoError(t, raw.ZAdd(ctx, "{ratelimit:bans}:i",
		redis.Z{Score: float64(until), Member: "p:198.51.100.0/24"},
		redis.Z{Score: inf(), Member: "k:user:42"}).Err())

	b, err := NewBans(ctx, raw)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	e, ok := b.Match(netip.Addr{}, "user:42", time.Now())
	require.True(t, ok, "the old key ban is in force")
	assert.Equal(t, "chargeback", e.Reason)
	e, ok = b.Match(netip.MustParseAddr("198.51.100.7"), "", time.Now())
	require.True(t, ok, "the old range ban is in force")
	assert.Equal(t, until, e.Expires.Add(b.skewNow()).UnixMilli())
	epoch, err := raw.HGet(ctx, "{ratelimit:bans}:m", "e").Result()
	require.NoError(t, err)
	assert.Equal(t, "1", epoch, "the old marker was taken as it is: nothing was lost")

	// A ban made here, as an old server finds it.
	_, err = b.Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "stuffing"}, time.Minute)
	require.NoError(t, err)
	v, err := raw.Get(ctx, "{ratelimit:bans}:b:p:203.0.113.0/24").Result()
	require.NoError(t, err)
	parts := strings.SplitN(v, "|", 3)
	require.Len(t, parts, 3, v)
	assert.Equal(t, "v1", parts[0])
	assert.Equal(t, "stuffing", parts[2])
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	require.NoError(t, err)
	score, err := raw.ZScore(ctx, "{ratelimit:bans}:i", "p:203.0.113.0/24").Result()
	require.NoError(t, err)
	assert.Equal(t, float64(ms), score, "the index scores the ban by its end")
	ttl, err := raw.PTTL(ctx, "{ratelimit:bans}:b:p:203.0.113.0/24").Result()
	require.NoError(t, err)
	assert.InDelta(t, float64(time.Minute), float64(ttl), float64(5*time.Second), "a TTL at its end")
	ver, err := raw.Get(ctx, "{ratelimit:bans}:v").Int64()
	require.NoError(t, err)
	assert.Greater(t, ver, int64(5), "the version moved on")
	n, err := raw.XLen(ctx, "{ratelimit:bans}:l").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the change is in the log the old servers poll")

	// WithKey names the hash tag, as WithPrefix did.
	other, err := NewBans(ctx, raw, WithKey("tenant"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = other.Ban(ctx, access.Entry{Key: "user:1"}, 0)
	require.NoError(t, err)
	v, err = raw.Get(ctx, "{tenant}:b:k:user:1").Result()
	require.NoError(t, err)
	assert.Equal(t, "v1|0|", v)
}

// skewNow returns the clock skew b corrects its Expires by.
func (b *Bans) skewNow() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.skew
}

func inf() float64 { f, _ := strconv.ParseFloat("+Inf", 64); return f }

// TestOverridesReadAndWriteTheOldLayout: with the default key, an
// Overrides reads the hash and marker as redisoverrides wrote them
// (written here with raw commands, HSET as the package doc tells
// operators), and writes where an old server reads.
func TestOverridesReadAndWriteTheOldLayout(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	require.NoError(t, raw.HSet(ctx, "rl:overrides", "search", "limit=500 burst=50").Err())
	require.NoError(t, raw.Set(ctx, "{rl:overrides}:alive", "1", 0).Err())

	w, err := NewOverrides(ctx, raw)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	p := core.Policy{Name: "search", Algorithm: core.TokenBucket, Limit: 100, Window: time.Minute, Burst: 10}
	got, err := w.Adjust(ctx, "c", p)
	require.NoError(t, err)
	assert.Equal(t, int64(500), got.Limit)
	assert.Equal(t, int64(50), got.Burst)
	fields, err := raw.HGetAll(ctx, "rl:overrides").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"search": "limit=500 burst=50"}, fields, "the marker was there: nothing written back")

	require.NoError(t, w.Put(ctx, "api", overrides.Override{Scale: 0.5}))
	v, err := raw.HGet(ctx, "rl:overrides", "api").Result()
	require.NoError(t, err)
	assert.Equal(t, "scale=0.5", v)
	require.NoError(t, w.Delete(ctx, "search"))
	ok, err := raw.HExists(ctx, "rl:overrides", "search").Result()
	require.NoError(t, err)
	assert.False(t, ok)

	// WithKey with a hash tag keeps its marker beside it, as before.
	tagged, err := NewOverrides(ctx, raw, WithKey("{rl}:overrides"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tagged.Close() })
	n, err := raw.Exists(ctx, "{rl}:overrides:alive").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}
