package access

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/apigate/ratelimit/internal/rules/accessentry"
)

// ErrInvalidEntry reports an Entry that [NewList] or [ParseEntry] rejects:
// neither or both of Prefix and Key set, an invalid or zoned range, a key
// or reason with control characters, invalid UTF-8 or over 1,024
// bytes. The errors of NewList also wrap core.ErrInvalidOption.
var ErrInvalidEntry = errors.New("access: invalid entry")

// Entry is one list entry: an address range or a client key.
type Entry struct {
	// Prefix is the address range; a single address is a /32 or /128. It
	// is the zero Prefix when Key is set.
	Prefix netip.Prefix
	// Key is a client key exactly as the limiter's key function produces
	// it, for example "user:42", or "key:" and 32 hex digits for an API
	// key hashed by keyfuncs.APIKeyHeader. It is "" when Prefix is set.
	Key string
	// Expires is the first instant at which the entry no longer matches;
	// the zero Time makes the entry permanent.
	Expires time.Time
	// Reason says why the entry is there, for logs and operators.
	Reason string
}

// liveAt reports whether e matches at now: it is permanent or expires
// after now.
func (e Entry) liveAt(now time.Time) bool {
	return e.Expires.IsZero() || now.Before(e.Expires)
}

// String formats e in the line format that [ParseEntry] reads, without
// the reason (which may hold anything a log line should not); the zero
// Entry is "-".
func (e Entry) String() string {
	target := e.Key
	switch {
	case target != "":
	case e.Prefix.IsValid():
		target = e.Prefix.String()
	default:
		return "-"
	}
	if e.Expires.IsZero() {
		return target
	}
	return target + " expires=" + e.Expires.UTC().Format(time.RFC3339)
}

// Error returns the text of String, so that an Entry prints the same
// whether fmt takes it for an error or a Stringer. An Entry is an error
// because it is the one a flow gives its Responder for a deny-listed
// request (httplimit.WithDenyList): errors.As(err, &entry) finds the
// entry that matched, for example to answer 451 with its Reason.
func (e Entry) Error() string { return e.String() }

// normalize checks e as NewList does and returns it in the form a List
// stores it: the range masked to its bits and an IPv4-mapped IPv6 range
// folded to IPv4. An invalid e is an error wrapping ErrInvalidEntry.
func (e Entry) normalize() (Entry, error) {
	n, err := e.validate()
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInvalidEntry, err)
	}
	return n, nil
}

// validate checks e as NewList takes it and returns it normalized: the
// range masked to its bits and an IPv4-mapped IPv6 range folded to IPv4,
// the form in which Match sees addresses.
func (e Entry) validate() (Entry, error) {
	p, err := accessentry.Check(e.Prefix, e.Key, e.Reason)
	if err != nil {
		return e, err
	}
	e.Prefix = p
	return e, nil
}

// The rules an Entry's text follows, shared with package rediswatch.
const maxFieldLen = accessentry.MaxFieldLen

var (
	normalizePrefix = accessentry.NormalizePrefix
	badRune         = accessentry.BadRune
	isControl       = accessentry.IsControl
	describeByte    = accessentry.DescribeByte
)
