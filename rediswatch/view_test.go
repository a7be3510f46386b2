package rediswatch

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
)

// TestViewMatchesList checks that a view, changed ban by ban by path
// copying, matches exactly as an access.List of the same bans, expired
// ones included (Match falls back to the next shorter live range), and
// that every earlier view is left as it was.
func TestViewMatchesList(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_800_000_000, 0)
	// Few distinct bits and addresses, so that ranges nest and collide.
	randPrefix := func() netip.Prefix {
		if rng.IntN(3) == 0 {
			a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(rng.IntN(4))})
			return netip.PrefixFrom(a, []int{32, 64, 120, 126, 128}[rng.IntN(5)]).Masked()
		}
		a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(3)), byte(rng.IntN(3)), byte(rng.IntN(4))})
		return netip.PrefixFrom(a, []int{0, 8, 16, 24, 30, 32}[rng.IntN(6)]).Masked()
	}
	randEntry := func() access.Entry {
		var e access.Entry
		if rng.IntN(4) == 0 {
			e.Key = fmt.Sprintf("user:%d", rng.IntN(40))
		} else {
			e.Prefix = randPrefix()
		}
		switch rng.IntN(3) {
		case 0: // permanent
		case 1:
			e.Expires = now.Add(-time.Duration(rng.IntN(100)) * time.Second) // expired
		default:
			e.Expires = now.Add(time.Duration(1+rng.IntN(100)) * time.Second)
		}
		e.Reason = fmt.Sprint(rng.IntN(1000))
		return e
	}
	type probe struct {
		addr netip.Addr
		key  string
	}
	probes := []probe{{}, {key: "user:1"}}
	for range 150 {
		p := probe{addr: randPrefix().Addr()}
		if rng.IntN(2) == 0 {
			// An address inside, not at the start of, a range.
			b := p.addr.AsSlice()
			b[len(b)-1] |= byte(rng.IntN(256))
			p.addr, _ = netip.AddrFromSlice(b)
		}
		if rng.IntN(4) == 0 {
			p.key = fmt.Sprintf("user:%d", rng.IntN(40))
		}
		if rng.IntN(8) == 0 && p.addr.Is4() {
			p.addr = netip.AddrFrom16(p.addr.As16()) // IPv4-mapped
		}
		probes = append(probes, p)
	}
	check := func(v *view, held map[string]access.Entry, step int) {
		entries := make([]access.Entry, 0, len(held))
		for _, e := range held {
			entries = append(entries, e)
		}
		l, err := access.NewList(entries...)
		require.NoError(t, err)
		require.Equal(t, len(l.Entries()), v.len(), "step %d", step)
		for _, at := range []time.Time{now, now.Add(-time.Hour), now.Add(time.Hour)} {
			for _, p := range probes {
				want, wok := l.Match(p.addr, p.key, at)
				got, gok := v.match(p.addr, p.key, at)
				require.Equal(t, wok, gok, "step %d: %v %q at %v", step, p.addr, p.key, at)
				require.Equal(t, want, got, "step %d: %v %q at %v", step, p.addr, p.key, at)
			}
		}
	}
	type saved struct {
		v    *view
		held map[string]access.Entry
	}
	var history []saved
	v := emptyView
	held := map[string]access.Entry{}
	for step := range 200 {
		bl := from(v)
		for range 1 + rng.IntN(5) {
			e := randEntry()
			if rng.IntN(3) == 0 {
				bl.del(e)
				delete(held, idOf(e))
				continue
			}
			bl.put(&ban{entry: e})
			held[idOf(e)] = e
		}
		v = bl.build()
		check(v, held, step)
		if step%25 == 0 {
			history = append(history, saved{v, copyMap(held)})
		}
	}
	for i, s := range history {
		check(s.v, s.held, -i) // untouched by the changes since
	}

	// A fresh builder, as a load makes, matches too.
	bl := fresh()
	for _, e := range held {
		bl.put(&ban{entry: e})
	}
	check(bl.build(), held, 1000)
}

func copyMap(m map[string]access.Entry) map[string]access.Entry {
	c := make(map[string]access.Entry, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func TestExpiryPrune(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var h expiry
	bl := fresh()
	perm := &ban{entry: access.Entry{Key: "user:perm"}}
	soon := &ban{entry: access.Entry{Key: "user:soon", Expires: now.Add(time.Second)}}
	later := &ban{entry: access.Entry{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Expires: now.Add(time.Minute)}}
	replaced := &ban{entry: access.Entry{Key: "user:re", Expires: now.Add(time.Second)}}
	for _, b := range []*ban{perm, soon, later, replaced} {
		bl.put(b)
	}
	v := bl.build()
	h.reset(v)
	// user:re is banned again for longer: its first ban must not take the
	// second with it.
	bl = from(v)
	again := &ban{entry: access.Entry{Key: "user:re", Expires: now.Add(time.Hour)}}
	bl.put(again)
	h.add(again)
	v = bl.build()

	assert.Nil(t, h.prune(v, now), "nothing expired yet")
	v2 := h.prune(v, now.Add(2*time.Second))
	require.NotNil(t, v2)
	assert.Equal(t, 3, v2.len())
	assert.Nil(t, v2.get(soon.entry))
	assert.Same(t, again, v2.get(again.entry))
	assert.Equal(t, 4, v.len(), "the view before is left as it was")
	v3 := h.prune(v2, now.Add(2*time.Minute))
	require.NotNil(t, v3)
	assert.Equal(t, 2, v3.len())
	assert.Same(t, perm, v3.get(perm.entry))
}

func TestJournalBound(t *testing.T) {
	var j journal
	for i := range 5 * journalLen {
		j.record(fmt.Sprintf("k:user:%d", i%(2*journalLen)), change{seq: int64(i + 1)})
	}
	assert.Len(t, j.last, journalLen)
	assert.LessOrEqual(t, len(j.order)-j.head, 4*journalLen+1)
	// The latest changes stay; the oldest went.
	s, ok := j.seen(fmt.Sprintf("k:user:%d", (5*journalLen-1)%(2*journalLen)))
	assert.True(t, ok)
	assert.Equal(t, int64(5*journalLen), s)
	// An older change of a target does not replace a later one.
	j.record("k:x", change{seq: 10})
	j.record("k:x", change{seq: 5})
	s, _ = j.seen("k:x")
	assert.Equal(t, int64(10), s)
}
