package access

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
	"unicode/utf8"
)

// MaxFieldLen is the longest Key or Reason, in bytes, that an Entry may
// hold.
const MaxFieldLen = 1024

// ErrInvalidEntry reports an Entry that [NewList] or [ParseEntry] rejects:
// neither or both of Prefix and Key set, an invalid or zoned range, a key
// or reason with control characters, invalid UTF-8 or over MaxFieldLen
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

// IsKey reports whether e is a key entry rather than an address range.
func (e Entry) IsKey() bool { return e.Key != "" }

// LiveAt reports whether e matches at now: it is permanent or expires
// after now.
func (e Entry) LiveAt(now time.Time) bool {
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

// Normalize checks e as NewList does and returns it in the form a List
// stores it: the range masked to its bits and an IPv4-mapped IPv6 range
// folded to IPv4. An invalid e (neither or both of Prefix and Key set, an
// invalid Prefix, a Key or Reason with control characters, invalid UTF-8
// or over MaxFieldLen bytes) is an error wrapping ErrInvalidEntry.
func (e Entry) Normalize() (Entry, error) {
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
	hasPrefix := e.Prefix != (netip.Prefix{})
	switch {
	case hasPrefix && e.Key != "":
		return e, errors.New("both Prefix and Key are set")
	case !hasPrefix && e.Key == "":
		return e, errors.New("neither Prefix nor Key is set")
	case hasPrefix:
		if !e.Prefix.IsValid() {
			return e, fmt.Errorf("invalid prefix %v", e.Prefix)
		}
		e.Prefix = normalizePrefix(e.Prefix)
	default:
		if err := checkText("key", e.Key); err != nil {
			return e, err
		}
	}
	if err := checkText("reason", e.Reason); err != nil {
		return e, err
	}
	return e, nil
}

// normalizePrefix masks p and folds an IPv4-mapped range (::ffff:a.b.c.d/n
// with n >= 96) to the IPv4 range it maps. A wider IPv6 range that merely
// contains the mapped block, such as ::/0, stays IPv6: Match folds mapped
// addresses to IPv4 first, so it covers native IPv6 addresses only.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// checkText rejects a key or reason longer than MaxFieldLen bytes, with
// invalid UTF-8 or with a control character (C0, DEL or C1).
func checkText(what, s string) error {
	if len(s) > MaxFieldLen {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", what, len(s), MaxFieldLen)
	}
	if i := badRune(s); i >= 0 {
		return fmt.Errorf("%s has %s at byte %d", what, describeByte(s, i), i+1)
	}
	return nil
}

// badRune returns the byte offset of the first control character or
// invalid UTF-8 sequence in s, or -1.
func badRune(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return i
			}
		}
		if isControl(r) {
			return i
		}
	}
	return -1
}

func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// describeByte names what is wrong at s[i] without echoing the byte raw.
func describeByte(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Sprintf("invalid UTF-8 (byte 0x%02x)", s[i])
	case r == 0:
		return "a NUL byte"
	default:
		return fmt.Sprintf("a control character (%U)", r)
	}
}
