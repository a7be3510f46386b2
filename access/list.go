// Package access holds allow and deny lists, and bans: address ranges (IPv4
// and IPv6 CIDRs, a single address being a /32 or /128) and client keys,
// each entry permanent or expiring, with a reason. The HTTP flow consults
// an allow list and a deny list before the limiter: an allow-listed
// request passes without a store call, a deny-listed one is refused at
// once. When both match, allow wins; the flow, not this package, enforces
// that order.
//
// A [List] is immutable and safe for concurrent use. It matches an address
// by longest prefix and a key by exact comparison, without allocating.
// Package accessfile keeps a List in step with a file, reloading it when
// the file changes. [Bans] holds bans added and removed from code while
// the server runs; package rediswatch shares them between servers through
// Redis. All of them are a [Matcher].
//
// # Which address
//
// The address given to Match must be the client address as the
// trusted-proxy model resolved it (keyfuncs.ClientIP's Addr), never a raw
// X-Forwarded-For or X-Real-IP value: a client that can write a header
// must not be able to move itself onto an allow list or off a deny list.
// Match folds IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) to IPv4 and
// ignores an IPv6 zone; entries are stored in the same form.
//
// # The line format
//
// [Parse] and accessfile.Watch read one entry a line ([NewList] builds a List
// of what Parse read):
//
//	# a comment line; blank lines are ignored
//	203.0.113.7                         single IPv4 address (a /32)
//	2001:db8::1                         single IPv6 address (a /128)
//	198.51.100.0/24                     IPv4 range
//	2001:db8::/32  # trailing comment   IPv6 range
//	user:42                             a client key, name:value
//	key:9f86d081884c7d659a2feaa0c55ad015 expires=2026-12-31T00:00:00Z reason=leaked key
//
// A line is a target, then optional fields separated by spaces or tabs:
// "expires=" and an RFC 3339 time (the entry stops matching at that
// instant), and "reason=" followed by free text that runs to the end of
// the line or to a comment, so it comes last. A '#' at the start of a
// line or after a space or tab starts a comment. A target that contains
// '/' or looks like an address must be a valid range or address: host
// bits set ("10.1.2.3/8"), a prefix length out of range ("1.2.3.4/33") or
// an IPv6 zone is an error, never a guess. Any other target is a key,
// written exactly as the limiter's key function produces it ("user:42",
// "key:" and 32 hex digits for keyfuncs' hashed API keys); it must have a
// name of letters, digits, '_', '-' or '.', a colon, and a value.
//
// Control characters (NUL included; a final CR is allowed), invalid UTF-8,
// a key or a reason over 1,024 bytes, a line over 4,096 bytes, a file
// over 2,000,000 lines or 256 MiB are errors that name the line and
// column (the limits wrap ErrTooLarge); a file with any
// error yields no entries at all.
package access

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Matcher is what the flow consults for an allow or a deny list: a
// [List], [Bans], accessfile.File or rediswatch.Bans. The flow asks every
// allow Matcher and every deny Matcher of a request; when an allow and a
// deny entry both match, allow wins. Implementations are safe for concurrent
// use and do not allocate in Match. The zero netip.Addr (address unknown)
// matches no range and the empty key matches no key entry.
type Matcher interface {
	// Match reports the entry that matches a client at now, if any. addr
	// is the client's address as the trusted-proxy model resolved it, key
	// the client key the limiter would use ("" if unknown). An expired
	// entry never matches.
	Match(addr netip.Addr, key string, now time.Time) (Entry, bool)
}

// List is an immutable set of entries, built by [NewList].
// It is safe for concurrent use; a nil *List matches nothing.
//
// Several entries for the same range or key collapse to the one that
// lives longest (a permanent one if there is one, else the latest Expires,
// else the first given), since the range or key matches exactly while
// that one does.
//
// An address matches the longest live range that contains it: a live
// 10.0.0.0/8 still matches 10.1.2.3 after an expired 10.1.0.0/16 has
// stopped matching it.
type List struct {
	table table // address -> index in ranges
	// ranges holds one node per distinct range; parent is the index of
	// the longest shorter range containing it, or -1, so that when the
	// longest range has expired Match falls back to the next live one.
	ranges []rangeNode
	keys   map[string]Entry
}

type rangeNode struct {
	entry  Entry
	parent int32
}

var _ Matcher = (*List)(nil)

// NewList validates entries and builds a List of them. An invalid entry
// (neither or both of Prefix and Key set, an invalid Prefix, a Key or
// Reason with control characters, invalid UTF-8 or over 1,024
// bytes) is an error naming its index, wrapping ErrInvalidEntry and
// core.ErrInvalidOption, and no List is built. A Prefix with host bits
// set is masked; an IPv4-mapped one is folded to IPv4. Entries that have
// already expired are kept: they never match.
func NewList(entries ...Entry) (*List, error) {
	l := &List{keys: make(map[string]Entry), ranges: make([]rangeNode, 0, len(entries))}
	byPrefix := make(map[netip.Prefix]int32, len(entries))
	for i, e := range entries {
		e, err := e.validate()
		if err != nil {
			return nil, fmt.Errorf("%w: %w: entries[%d]: %w", core.ErrInvalidOption, ErrInvalidEntry, i, err)
		}
		if e.Key != "" {
			if old, ok := l.keys[e.Key]; !ok || outlives(e, old) {
				l.keys[e.Key] = e
			}
			continue
		}
		if j, ok := byPrefix[e.Prefix]; ok {
			if outlives(e, l.ranges[j].entry) {
				l.ranges[j].entry = e
			}
			continue
		}
		if len(l.ranges) == maxRanges {
			return nil, fmt.Errorf("%w: %w: entries[%d]: more than %d ranges", core.ErrInvalidOption, ErrInvalidEntry, i, maxRanges)
		}
		j := int32(len(l.ranges))
		byPrefix[e.Prefix] = j
		l.ranges = append(l.ranges, rangeNode{entry: e, parent: -1})
	}
	l.table = newTable(l.ranges)
	return l, nil
}

// maxRanges bounds the distinct ranges of one List so that an index fits
// the table's int32.
const maxRanges = 1<<31 - 1

// outlives reports whether a matches for longer than b.
func outlives(a, b Entry) bool {
	switch {
	case b.Expires.IsZero():
		return false
	case a.Expires.IsZero():
		return true
	default:
		return a.Expires.After(b.Expires)
	}
}

// Match reports the entry matching key or addr at now. A key entry equal
// to key is tried first (an empty key matches nothing); then the longest
// live range containing addr, after folding an IPv4-mapped addr to IPv4
// and dropping an IPv6 zone. An invalid addr matches no range. Match does
// not allocate.
func (l *List) Match(addr netip.Addr, key string, now time.Time) (Entry, bool) {
	if l == nil {
		return Entry{}, false
	}
	if key != "" && len(l.keys) > 0 {
		if e, ok := l.keys[key]; ok && e.liveAt(now) {
			return e, true
		}
	}
	if !addr.IsValid() || len(l.ranges) == 0 {
		return Entry{}, false
	}
	for i := l.table.lookup(addr.Unmap()); i >= 0; {
		n := &l.ranges[i]
		if n.entry.liveAt(now) {
			return n.entry, true
		}
		i = n.parent
	}
	return Entry{}, false
}

// size returns the number of distinct ranges and keys in l.
func (l *List) size() int {
	if l == nil {
		return 0
	}
	return len(l.ranges) + len(l.keys)
}

// Entries returns a copy of l's entries, one per distinct range or key,
// expired ones included: ranges in the order first given, then keys in no
// particular order.
func (l *List) Entries() []Entry {
	if l == nil {
		return nil
	}
	out := make([]Entry, 0, l.size())
	for _, n := range l.ranges {
		out = append(out, n.entry)
	}
	for _, e := range l.keys {
		out = append(out, e)
	}
	return out
}
