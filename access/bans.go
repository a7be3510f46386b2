package access

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/accessentry"
)

// defaultMaxBans is how many bans a [Bans] holds at most unless NewBans
// says otherwise.
const defaultMaxBans = 100_000

// maxMaxBans bounds NewBans's max. Every change rebuilds the lookup table,
// in time linear in the number of bans (about 75 ms for 100,000), which is
// what bounds it: bans change rarely, matches are what must be fast.
const maxMaxBans = 10_000_000

// Bans is a set of bans, address ranges or client keys, added and removed
// from code while the server runs; it is a deny [Matcher] for one process
// (package rediswatch shares bans between servers through Redis). Each ban
// is permanent or lasts until its Expires: it stops matching at that
// instant and is dropped from memory by the next Ban, Unban or List.
//
// A ban is in force for every request that starts after Ban returns;
// Match does not allocate. Bans is safe for concurrent use. The zero Bans
// is empty and ready to use, and holds at most 100,000 bans, as NewBans(0)
// does.
type Bans struct {
	max int
	now func() time.Time // time.Now; tests replace it

	mu   sync.Mutex // serializes changes; guards bans
	bans map[banKey]Entry
	// list is what Match reads, with one atomic load; Ban and Unban build
	// a new immutable List and swap it in.
	list atomic.Pointer[List]
}

// banKey is what a ban is for: a range or a key.
type banKey struct {
	prefix netip.Prefix
	key    string
}

func keyOf(e Entry) banKey { return banKey{e.Prefix, e.Key} }

var _ Matcher = (*Bans)(nil)

// NewBans returns an empty Bans that holds at most max bans, from 1 to
// 10,000,000; 0 means 100,000. Every change rebuilds the lookup table, in
// time linear in the number of bans (about 75 ms for 100,000), which is
// what bounds it: bans change rarely, matches are what must be fast. A
// max out of range is an error wrapping core.ErrInvalidOption.
func NewBans(max int) (*Bans, error) {
	if max < 0 || max > maxMaxBans {
		return nil, fmt.Errorf("%w: access.NewBans: max %d is out of range [0, %d]", core.ErrInvalidOption, max, maxMaxBans)
	}
	return &Bans{max: max}, nil
}

func (b *Bans) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// Ban bans e.Prefix or e.Key (exactly one set, as in a List; a single
// address is a /32 or /128), with e.Reason: for d from now when d > 0
// (e.Expires is then ignored), else until e.Expires, or for good when
// Expires is zero too. A ban of a target already banned replaces it, so
// a ban may be lengthened, shortened or made permanent. It returns the
// ban as stored (the range masked and an IPv4-mapped one folded to IPv4,
// Expires set). An invalid entry, a negative d or an Expires not after
// now is an error wrapping ErrInvalidEntry; a ban past the maximum wraps
// ErrTooLarge.
func (b *Bans) Ban(e Entry, d time.Duration) (Entry, error) {
	if d < 0 {
		return Entry{}, fmt.Errorf("%w: ban duration %v is negative", ErrInvalidEntry, d)
	}
	e, err := e.normalize()
	if err != nil {
		return Entry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	if d > 0 {
		e.Expires = now.Add(d)
	}
	if !e.liveAt(now) {
		return Entry{}, fmt.Errorf("%w: %v has expired already (now is %v)", ErrInvalidEntry, e, now.UTC().Format(time.RFC3339Nano))
	}
	b.pruneLocked(now)
	t := keyOf(e)
	if _, ok := b.bans[t]; !ok && len(b.bans) >= b.maxBans() {
		return Entry{}, fmt.Errorf("%w: %d bans held, the maximum", ErrTooLarge, len(b.bans))
	}
	if b.bans == nil {
		b.bans = make(map[banKey]Entry)
	}
	old, had := b.bans[t]
	b.bans[t] = e
	if err := b.rebuildLocked(); err != nil {
		if had {
			b.bans[t] = old
		} else {
			delete(b.bans, t)
		}
		return Entry{}, err
	}
	return e, nil
}

// Unban lifts the ban on target.Prefix or target.Key (exactly one set; its
// Expires and Reason are ignored) and reports whether there was one in
// force. An invalid target is an error wrapping ErrInvalidEntry.
func (b *Bans) Unban(target Entry) (bool, error) {
	t, err := Entry{Prefix: target.Prefix, Key: target.Key}.normalize()
	if err != nil {
		return false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pruneLocked(b.clock()) {
		_ = b.rebuildLocked()
	}
	old, ok := b.bans[keyOf(t)]
	if !ok {
		return false, nil
	}
	delete(b.bans, keyOf(t))
	if err := b.rebuildLocked(); err != nil {
		b.bans[keyOf(t)] = old
		return false, err
	}
	return true, nil
}

// List returns the bans in force now, ranges first (IPv4, then IPv6, in
// address order), then keys in byte order.
func (b *Bans) List() []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pruneLocked(b.clock()) {
		// The bans are valid, so NewList cannot fail.
		_ = b.rebuildLocked()
	}
	out := make([]Entry, 0, len(b.bans))
	for _, e := range b.bans {
		out = append(out, e)
	}
	sortEntries(out)
	return out
}

// Match reports the ban in force at now that matches key or addr, as
// [List.Match] does. It does not allocate.
func (b *Bans) Match(addr netip.Addr, key string, now time.Time) (Entry, bool) {
	return b.list.Load().Match(addr, key, now)
}

func (b *Bans) maxBans() int {
	if b.max == 0 {
		return defaultMaxBans
	}
	return b.max
}

// pruneLocked drops the bans expired at now and reports whether any
// went.
func (b *Bans) pruneLocked(now time.Time) bool {
	n := len(b.bans)
	for t, e := range b.bans {
		if !e.liveAt(now) {
			delete(b.bans, t)
		}
	}
	return len(b.bans) != n
}

func (b *Bans) rebuildLocked() error {
	entries := make([]Entry, 0, len(b.bans))
	for _, e := range b.bans {
		entries = append(entries, e)
	}
	l, err := NewList(entries...)
	if err != nil {
		return err
	}
	b.list.Store(l)
	return nil
}

// sortEntries sorts entries as Bans.List returns them: ranges first
// (IPv4, then IPv6, in address order, a shorter range before a longer one
// at the same address), then keys in byte order.
func sortEntries(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int { return accessentry.Compare(a.Prefix, a.Key, b.Prefix, b.Key) })
}
