package reputation_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/rediswatch"
	"github.com/apigate/ratelimit/reputation"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestNewRefuses(t *testing.T) {
	ban := []reputation.Band{{Name: "b", Above: 1, Ban: true}}
	shared, err := rediswatch.NewScores(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	require.NoError(t, err)
	for name, cfg := range map[string]reputation.Config{
		"no band":             {},
		"a band with no name": {Bands: []reputation.Band{{Above: 1}}},
		"a negative Above":    {Bands: []reputation.Band{{Name: "a", Above: -1}}},
		"bands out of order":  {Bands: []reputation.Band{{Name: "a", Above: 5}, {Name: "b", Above: 5}}},
		"a Scale above 1":     {Bands: []reputation.Band{{Name: "a", Above: 5, Scale: 2}}},
		"an unknown signal":   {Bands: ban, Weights: map[reputation.Signal]float64{99: 1}},
		"a negative weight":   {Bands: ban, Weights: map[reputation.Signal]float64{reputation.Denied: -1}},
		"a weight too large":  {Bands: ban, Weights: map[reputation.Signal]float64{reputation.Denied: 1 << 21}},
		"a negative HalfLife": {Bands: ban, HalfLife: -time.Second},
		// Scores every server shares, bans only this one would hold.
		"shared scores with local bans": {Bands: ban, Scores: shared},
	} {
		_, err := reputation.New(cfg)
		assert.ErrorIs(t, err, core.ErrInvalidOption, name)
	}
}

// tracker returns a Tracker of cfg on a virtual clock, and what it
// reported of each signal.
func tracker(t *testing.T, cfg reputation.Config) (*reputation.Tracker, *time.Time, *[]outcome) {
	t.Helper()
	now := t0
	cfg.Now = func() time.Time { return now }
	rep, err := reputation.New(cfg)
	require.NoError(t, err)
	var outs []outcome
	reputation.OnOutcome(rep, func(key string, s reputation.Signal, score float64, band string, acted bool) {
		outs = append(outs, outcome{key, s, score, band, acted})
	})
	return rep, &now, &outs
}

type outcome struct {
	key   string
	s     reputation.Signal
	score float64
	band  string
	acted bool
}

// TestBansEscalate: a ban lasts BanFor, doubled for each offence
// remembered, up to BanMax, ±10%; offences are forgiven on their own
// half-life, so a client that behaves recovers its first ban's length.
func TestBansEscalate(t *testing.T) {
	bans, err := access.NewBans(100)
	require.NoError(t, err)
	rep, now, outs := tracker(t, reputation.Config{
		Bands:  []reputation.Band{{Name: "abusive", Above: 3, Ban: true}},
		Bans:   localBanner{bans},
		BanFor: time.Minute, BanMax: 10 * time.Minute, OffenceHalfLife: 100 * time.Hour, HalfLife: time.Minute,
	})
	offend := func() time.Duration {
		t.Helper()
		from := len(*outs)
		for range 4 {
			rep.Record(context.Background(), "ip:192.0.2.7", reputation.Denied)
		}
		acted := 0
		for _, o := range (*outs)[from:] {
			if o.acted {
				acted++
			}
		}
		require.Equal(t, 1, acted, "banned once, as it entered the band: %+v", (*outs)[from:])
		e, ok := bans.Match(netip.Addr{}, "ip:192.0.2.7", time.Now()) // the bans keep the real clock
		require.True(t, ok)
		assert.Equal(t, "reputation: abusive", e.Reason)
		d := time.Until(e.Expires)
		*now = now.Add(20 * time.Minute) // the score decays to nothing, the offence stays
		_, err := bans.Unban(e)
		require.NoError(t, err)
		return d
	}
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		got := offend()
		assert.InDelta(t, float64(want), float64(got), float64(want)/10+float64(time.Second), "offence %d", i+1)
	}
	// A client still abusive once its ban ends is banned again at its
	// next bad signal, not before, and for longer.
	from := len(*outs)
	for range 6 {
		rep.Record(context.Background(), "ip:192.0.2.9", reputation.Denied)
	}
	for range 5 { // banned: more signals ban no more
		rep.Record(context.Background(), "ip:192.0.2.9", reputation.DenyListed)
	}
	acted := 0
	for _, o := range (*outs)[from:] {
		if o.acted {
			acted++
		}
	}
	assert.Equal(t, 1, acted, "one ban, however many signals during it")
	e, ok := bans.Match(netip.Addr{}, "ip:192.0.2.9", time.Now())
	require.True(t, ok)
	_, err = bans.Unban(e) // it has ended
	require.NoError(t, err)
	rep.Record(context.Background(), "ip:192.0.2.9", reputation.Unrouted)
	require.True(t, (*outs)[len(*outs)-1].acted, "banned again at its first bad signal after the ban")
	e, ok = bans.Match(netip.Addr{}, "ip:192.0.2.9", time.Now())
	require.True(t, ok)
	assert.InDelta(t, float64(2*time.Minute), float64(time.Until(e.Expires)), float64(13*time.Second), "a second offence")

	*now = now.Add(2000 * time.Hour) // offences forgiven: 6 × 2^-20
	assert.InDelta(t, float64(time.Minute), float64(offend()), float64(7*time.Second), "a first offence again")
}

type localBanner struct{ *access.Bans }

func (b localBanner) Ban(_ context.Context, e access.Entry, d time.Duration) (access.Entry, error) {
	return b.Bans.Ban(e, d)
}

// TestAdjustScales: a client in a band that scales gets its limits
// scaled, by the score this server holds, and whole again once it has
// decayed; in shadow mode nothing is scaled nor banned.
func TestAdjustScales(t *testing.T) {
	bands := []reputation.Band{{Name: "suspicious", Above: 5, Scale: 0.5}, {Name: "abusive", Above: 10, Ban: true}}
	rep, now, _ := tracker(t, reputation.Config{Bands: bands, HalfLife: time.Minute})
	p := core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 100, Burst: 40, Window: time.Minute}
	for range 6 {
		rep.Record(context.Background(), "k", reputation.Refused)
	}
	q, err := rep.Adjust(context.Background(), "k", p)
	require.NoError(t, err)
	assert.Equal(t, int64(50), q.Limit)
	assert.Equal(t, int64(20), q.Burst)
	q, _ = rep.Adjust(context.Background(), "other", p)
	assert.Equal(t, p, q, "another client")
	*now = now.Add(time.Minute) // 6 → 3
	q, _ = rep.Adjust(context.Background(), "k", p)
	assert.Equal(t, p, q, "decayed below the band")

	shadow, _, outs := tracker(t, reputation.Config{Bands: bands, Shadow: true})
	for range 20 {
		shadow.Record(context.Background(), "k", reputation.Denied)
	}
	q, _ = shadow.Adjust(context.Background(), "k", p)
	assert.Equal(t, p, q, "shadow mode scales nothing")
	last := (*outs)[len(*outs)-1]
	assert.Equal(t, "abusive", last.band, "it scores all the same")
	for _, o := range *outs {
		assert.False(t, o.acted, "shadow mode bans no one")
	}
}

// TestPenalize: the application's signals, of their weight, through the
// request's context; and nothing on a context no Tracker scores.
func TestPenalize(t *testing.T) {
	rep, _, outs := tracker(t, reputation.Config{Bands: []reputation.Band{{Name: "b", Above: 100}}})
	ctx := rep.NewContext(context.Background(), "k")
	reputation.Penalize(ctx, 7.5)
	reputation.Penalize(ctx, -1) // ignored
	reputation.Penalize(context.Background(), 5)
	require.Len(t, *outs, 1)
	assert.Equal(t, outcome{"k", reputation.Reported, 7.5, "", false}, (*outs)[0])
}

// BenchmarkAdjust is what a Tracker that scales costs a decision: the
// score read, in process.
func BenchmarkAdjust(b *testing.B) {
	rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "s", Above: 5, Scale: 0.5}}})
	require.NoError(b, err)
	rep.Record(context.Background(), "ip:192.0.2.1", reputation.Denied)
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if q, _ := rep.Adjust(ctx, "ip:192.0.2.1", p); q.Limit != 100 {
			b.Fatal("scaled")
		}
	}
}

// TestLimiterScales: as a Limiter's PolicySource, a Tracker scales the
// clients in a band that scales, and leaves the others' policy as it
// is.
func TestLimiterScales(t *testing.T) {
	rep, _, _ := tracker(t, reputation.Config{Bands: []reputation.Band{{Name: "suspicious", Above: 2, Scale: 0.5}}})
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 100, Window: time.Hour}
	l, err := core.NewLimiter(store, []core.Policy{p}, core.WithPolicySource(rep))
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.AllowN(ctx, "ip:192.0.2.1", 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, int64(100), d.Limit)
	for range 3 {
		rep.Record(ctx, "ip:192.0.2.1", reputation.Refused)
	}
	d, err = l.AllowN(ctx, "ip:192.0.2.1", 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, int64(50), d.Limit, "suspicious: half")
	assert.Equal(t, "p", d.Policy.Name)
	d, err = l.AllowN(ctx, "ip:192.0.2.2", 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, int64(100), d.Limit, "another client")
	out := make([]core.Decision, 1)
	d, _, err = l.AllowLayers(ctx, time.Time{}, []core.Request{{Key: "ip:192.0.2.1", Cost: 1}}, out)
	require.NoError(t, err)
	assert.Equal(t, int64(50), d.Limit, "by AllowLayers too")
}
