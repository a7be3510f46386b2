package access_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
)

// fakeClock is a clock that tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func newBans(t *testing.T, max int) (*access.Bans, *fakeClock) {
	t.Helper()
	b, err := access.NewBans(max)
	require.NoError(t, err)
	clock := &fakeClock{now: t0}
	access.SetBansClock(b, clock.Now)
	return b, clock
}

func TestBans(t *testing.T) {
	b, clock := newBans(t, 0)
	_, ok := b.Match(addr("203.0.113.7"), "user:42", t0)
	assert.False(t, ok, "empty")

	e, err := b.Ban(access.Entry{Prefix: pfx("203.0.113.7/32"), Reason: "scanner"}, time.Hour)
	require.NoError(t, err)
	assert.True(t, e.Expires.Equal(t0.Add(time.Hour)))
	_, err = b.Ban(access.Entry{Prefix: netip.PrefixFrom(addr("::ffff:198.51.100.77"), 120), Reason: "mapped and unmasked"}, 0)
	require.NoError(t, err)
	_, err = b.Ban(access.Entry{Key: "user:42", Expires: t0.Add(time.Minute), Reason: "abuse"}, 0)
	require.NoError(t, err)
	_, err = b.Ban(access.Entry{Prefix: pfx("2001:db8::/32"), Reason: "v6"}, 0)
	require.NoError(t, err)

	check := func(now time.Time, a, key, want string) {
		t.Helper()
		e, ok := b.Match(addr(a), key, now)
		assert.Equal(t, want != "", ok, "%s %q at %v", a, key, now)
		assert.Equal(t, want, e.Reason, "%s %q at %v", a, key, now)
	}
	check(t0, "203.0.113.7", "", "scanner")
	check(t0, "203.0.113.8", "", "")
	check(t0, "198.51.100.1", "", "mapped and unmasked")
	check(t0, "10.0.0.1", "user:42", "abuse")
	check(t0, "2001:db8::1", "", "v6")
	check(t0.Add(time.Minute-time.Nanosecond), "10.0.0.1", "user:42", "abuse")
	check(t0.Add(time.Minute), "10.0.0.1", "user:42", "") // stops at its instant

	list := b.List()
	require.Len(t, list, 4)
	assert.Equal(t, []string{"198.51.100.0/24", "203.0.113.7/32", "2001:db8::/32", "user:42"},
		[]string{list[0].Prefix.String(), list[1].Prefix.String(), list[2].Prefix.String(), list[3].Key})

	// Expired bans are dropped.
	clock.Set(t0.Add(time.Minute))
	assert.Len(t, b.List(), 3)

	// A second ban of the same target replaces the first.
	_, err = b.Ban(access.Entry{Prefix: pfx("203.0.113.7/32"), Reason: "for good"}, 0)
	require.NoError(t, err)
	check(t0.Add(2*time.Hour), "203.0.113.7", "", "for good")
	assert.Len(t, b.List(), 3)

	ok, err = b.Unban(access.Entry{Prefix: pfx("203.0.113.7/32"), Reason: "ignored"})
	require.NoError(t, err)
	assert.True(t, ok)
	check(t0, "203.0.113.7", "", "")
	ok, err = b.Unban(access.Entry{Prefix: pfx("203.0.113.7/32")})
	require.NoError(t, err)
	assert.False(t, ok, "not banned any more")
	ok, err = b.Unban(access.Entry{Key: "user:42"})
	require.NoError(t, err)
	assert.False(t, ok, "expired is not in force")
	ok, err = b.Unban(access.Entry{Prefix: pfx("::ffff:198.51.100.0/120")})
	require.NoError(t, err)
	assert.True(t, ok, "the same range, written mapped")
	assert.Len(t, b.List(), 1)
}

func TestBansRejects(t *testing.T) {
	b, _ := newBans(t, 0)
	for name, e := range map[string]access.Entry{
		"neither":       {Reason: "x"},
		"both":          {Prefix: pfx("10.0.0.0/8"), Key: "user:1"},
		"invalid range": {Prefix: netip.PrefixFrom(addr("10.0.0.1"), 33)},
		"control":       {Key: "user:\x1b[0m"},
		"long reason":   {Key: "user:1", Reason: strings.Repeat("r", access.MaxFieldLen+1)},
		"expired":       {Key: "user:1", Expires: t0},
		"long expired":  {Key: "user:1", Expires: t0.Add(-time.Hour)},
	} {
		_, err := b.Ban(e, 0)
		require.ErrorIs(t, err, access.ErrInvalidEntry, name)
	}
	for _, d := range []time.Duration{-time.Nanosecond, -time.Second} {
		_, err := b.Ban(access.Entry{Key: "user:1"}, d)
		require.ErrorIs(t, err, access.ErrInvalidEntry)
	}
	for _, e := range []access.Entry{{}, {Prefix: pfx("10.0.0.0/8"), Key: "user:1"}, {Key: "user:\x00"}} {
		_, err := b.Unban(e)
		require.ErrorIs(t, err, access.ErrInvalidEntry)
	}
	assert.Empty(t, b.List(), "nothing half-applied")

	for _, max := range []int{-1, 10_000_001} {
		b, err := access.NewBans(max)
		assert.Nil(t, b)
		require.ErrorIs(t, err, core.ErrInvalidOption)
	}
}

func TestBansMax(t *testing.T) {
	b, clock := newBans(t, 2)
	_, err := b.Ban(access.Entry{Key: "user:1"}, time.Minute)
	require.NoError(t, err)
	_, err = b.Ban(access.Entry{Key: "user:2"}, 0)
	require.NoError(t, err)
	_, err = b.Ban(access.Entry{Key: "user:3"}, 0)
	require.ErrorIs(t, err, access.ErrTooLarge)
	_, ok := b.Match(netip.Addr{}, "user:3", t0)
	assert.False(t, ok)
	// Replacing a ban is not one more.
	_, err = b.Ban(access.Entry{Key: "user:2", Reason: "again"}, 0)
	require.NoError(t, err)
	// An expired ban makes room.
	clock.Set(t0.Add(time.Minute))
	_, err = b.Ban(access.Entry{Key: "user:3"}, 0)
	require.NoError(t, err)
	assert.Len(t, b.List(), 2)
}

func TestBansZeroValue(t *testing.T) {
	var b access.Bans
	_, ok := b.Match(addr("10.0.0.1"), "user:1", t0)
	assert.False(t, ok)
	assert.Empty(t, b.List())
	_, err := b.Ban(access.Entry{Prefix: pfx("10.0.0.0/8")}, time.Hour)
	require.NoError(t, err)
	_, ok = b.Match(addr("10.0.0.1"), "", time.Now())
	assert.True(t, ok)
}

func TestBansConcurrent(t *testing.T) {
	b, _ := newBans(t, 0)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				e := access.Entry{Key: fmt.Sprintf("user:%d-%d", w, i)}
				_, err := b.Ban(e, 0)
				assert.NoError(t, err)
				_, ok := b.Match(netip.Addr{}, e.Key, t0)
				assert.True(t, ok, "in force once Ban returns")
				if i%2 == 0 {
					ok, err := b.Unban(e)
					assert.NoError(t, err)
					assert.True(t, ok)
				}
				_ = b.List()
			}
		})
	}
	wg.Wait()
	assert.Len(t, b.List(), 4*100)
}

func TestBansMatchDoesNotAllocate(t *testing.T) {
	b, _ := newBans(t, 0)
	for i := range 1000 {
		_, err := b.Ban(access.Entry{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)}, 0)
		require.NoError(t, err)
	}
	_, err := b.Ban(access.Entry{Key: "user:1"}, 0)
	require.NoError(t, err)
	hit, miss := addr("10.3.7.1"), addr("2001:db8::1")
	allocs := testing.AllocsPerRun(1000, func() {
		b.Match(hit, "", t0)
		b.Match(miss, "user:1", t0)
		b.Match(miss, "user:2", t0)
	})
	assert.Zero(t, allocs)
}

func BenchmarkBansMatch(b *testing.B) {
	bans, err := access.NewBans(0)
	require.NoError(b, err)
	for _, e := range mixed(2000) {
		_, err := bans.Ban(e, 0)
		require.NoError(b, err)
	}
	hit := bans.List()[0].Prefix.Addr()
	b.ReportAllocs()
	for b.Loop() {
		bans.Match(hit, "user:1", t0)
	}
}

func ExampleBans() {
	var bans access.Bans // the zero Bans is ready; access.NewBans sets another maximum
	// From an admin endpoint, an abuse detector ...
	if _, err := bans.Ban(access.Entry{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "credential stuffing"}, time.Hour); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := bans.Ban(access.Entry{Key: "user:42", Reason: "chargeback"}, 0); err != nil { // permanent
		fmt.Println(err)
		return
	}
	// ... while the flow asks, for each request:
	e, ok := bans.Match(netip.MustParseAddr("203.0.113.9"), "user:7", time.Now())
	fmt.Println(ok, e.Prefix, e.Reason)
	e, ok = bans.Match(netip.MustParseAddr("192.0.2.1"), "user:42", time.Now())
	fmt.Println(ok, e.Key, e.Reason)

	lifted, err := bans.Unban(access.Entry{Key: "user:42"})
	fmt.Println(lifted, err, len(bans.List()))
	// Output:
	// true 203.0.113.0/24 credential stuffing
	// true user:42 chargeback
	// true <nil> 1
}
