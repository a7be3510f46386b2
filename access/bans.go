package access

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
)

// DefaultMaxBans is how many bans a [Bans] holds at most unless
// WithMaxBans says otherwise.
const DefaultMaxBans = 100_000

// ErrTooManyBans is returned by a Ban that would hold more bans than the
// maximum (WithMaxBans); the ban is not added.
var ErrTooManyBans = errors.New("access: too many bans")

// BansOption configures [NewBans]. A bad value makes NewBans return an
// error wrapping core.ErrInvalidOption.
type BansOption func(*Bans) error

// WithMaxBans sets the most bans held at once, from 1 to 10,000,000; the
// default is DefaultMaxBans. Every change rebuilds the lookup table, in
// time linear in the number of bans (about 75 ms for 100,000), which is
// what bounds it: bans change rarely, matches are what must be fast.
func WithMaxBans(n int) BansOption {
	return func(b *Bans) error {
		if n < 1 || n > 10_000_000 {
			return fmt.Errorf("%w: access.WithMaxBans: %d is out of range [1, 10000000]", core.ErrInvalidOption, n)
		}
		b.max = n
		return nil
	}
}

// Bans is a set of bans, address ranges or client keys, added and removed
// from code while the server runs; it is a deny [Matcher] for one process
// (package redisbans shares bans between servers through Redis). Each ban
// is permanent or lasts until its Expires: it stops matching at that
// instant and is dropped from memory by the next Ban, Unban or List.
//
// Match reads an immutable [List] with one atomic load and does not
// allocate; Ban and Unban build a new List and swap it in, so a ban is in
// force for every request that starts after Ban returns. Bans is safe for
// concurrent use. The zero Bans is empty and ready to use, with
// DefaultMaxBans.
type Bans struct {
	max int
	now func() time.Time // time.Now; tests replace it

	mu   sync.Mutex // serializes changes; guards bans
	bans map[banKey]Entry
	list atomic.Pointer[List]
}

// banKey is what a ban is for: a range or a key.
type banKey struct {
	prefix netip.Prefix
	key    string
}

func keyOf(e Entry) banKey { return banKey{e.Prefix, e.Key} }

var _ Matcher = (*Bans)(nil)

// NewBans returns an empty Bans configured by opts.
func NewBans(opts ...BansOption) (*Bans, error) {
	b := &Bans{}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: access.NewBans: nil option", core.ErrInvalidOption)
		}
		if err := o(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *Bans) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// Ban bans e.Prefix or e.Key (exactly one set, as in a List; a single
// address is a /32 or /128) until e.Expires, or for good when Expires is
// zero, with e.Reason. A ban of a target already banned replaces it, so a
// ban may be lengthened, shortened or made permanent. It returns the ban
// as stored (the range masked and an IPv4-mapped one folded to IPv4). An
// invalid entry or an Expires not after now is an error wrapping
// ErrInvalidEntry; a ban past the maximum is ErrTooManyBans.
func (b *Bans) Ban(e Entry) (Entry, error) {
	e, err := e.Normalize()
	if err != nil {
		return Entry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	if !e.LiveAt(now) {
		return Entry{}, fmt.Errorf("%w: %v has expired already (now is %v)", ErrInvalidEntry, e, now.UTC().Format(time.RFC3339Nano))
	}
	b.pruneLocked(now)
	t := keyOf(e)
	if _, ok := b.bans[t]; !ok && len(b.bans) >= b.maxBans() {
		return Entry{}, fmt.Errorf("%w: %d bans held, the maximum", ErrTooManyBans, len(b.bans))
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

// BanFor bans e.Prefix or e.Key for d from now (d > 0), ignoring
// e.Expires; see Ban.
func (b *Bans) BanFor(e Entry, d time.Duration) (Entry, error) {
	if d <= 0 {
		return Entry{}, fmt.Errorf("%w: ban duration %v is not positive", ErrInvalidEntry, d)
	}
	e.Expires = b.clock().Add(d)
	return b.Ban(e)
}

// Unban lifts the ban on target.Prefix or target.Key (exactly one set; its
// Expires and Reason are ignored) and reports whether there was one in
// force. An invalid target is an error wrapping ErrInvalidEntry.
func (b *Bans) Unban(target Entry) (bool, error) {
	t, err := Entry{Prefix: target.Prefix, Key: target.Key}.Normalize()
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
	SortEntries(out)
	return out
}

// Match reports the ban in force at now that matches key or addr, as
// [List.Match] does. It does not allocate.
func (b *Bans) Match(addr netip.Addr, key string, now time.Time) (Entry, bool) {
	return b.list.Load().Match(addr, key, now)
}

func (b *Bans) maxBans() int {
	if b.max == 0 {
		return DefaultMaxBans
	}
	return b.max
}

// pruneLocked drops the bans expired at now and reports whether any
// went.
func (b *Bans) pruneLocked(now time.Time) bool {
	n := len(b.bans)
	for t, e := range b.bans {
		if !e.LiveAt(now) {
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

// SortEntries sorts entries as Bans.List returns them: ranges first
// (IPv4, then IPv6, in address order, a shorter range before a longer one
// at the same address), then keys in byte order.
func SortEntries(entries []Entry) {
	slices.SortFunc(entries, func(a, b Entry) int {
		if a.IsKey() != b.IsKey() {
			if a.IsKey() {
				return 1
			}
			return -1
		}
		if a.IsKey() {
			return cmp.Compare(a.Key, b.Key)
		}
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits())
	})
}
