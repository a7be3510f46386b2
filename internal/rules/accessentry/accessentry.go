// Package accessentry holds the rules of an access entry that package
// access and package rediswatch both apply: which targets and texts are
// valid, the one form a range is stored in, and the order in which bans
// are listed. It knows nothing of access.Entry, so that both can import
// it.
package accessentry

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"unicode/utf8"
)

// MaxFieldLen is the longest key or reason, in bytes, that an entry may
// hold.
const MaxFieldLen = 1024

// Check checks an entry's target (exactly one of prefix and key set) and
// reason, and returns prefix in the form a List stores it (see
// NormalizePrefix). The error says what is wrong, without a sentinel.
func Check(prefix netip.Prefix, key, reason string) (netip.Prefix, error) {
	hasPrefix := prefix != (netip.Prefix{})
	switch {
	case hasPrefix && key != "":
		return prefix, errors.New("both Prefix and Key are set")
	case !hasPrefix && key == "":
		return prefix, errors.New("neither Prefix nor Key is set")
	case hasPrefix:
		if !prefix.IsValid() {
			return prefix, fmt.Errorf("invalid prefix %v", prefix)
		}
		prefix = NormalizePrefix(prefix)
	default:
		if err := CheckText("key", key); err != nil {
			return prefix, err
		}
	}
	if err := CheckText("reason", reason); err != nil {
		return prefix, err
	}
	return prefix, nil
}

// NormalizePrefix masks p and folds an IPv4-mapped range (::ffff:a.b.c.d/n
// with n >= 96) to the IPv4 range it maps. A wider IPv6 range that merely
// contains the mapped block, such as ::/0, stays IPv6: Match folds mapped
// addresses to IPv4 first, so it covers native IPv6 addresses only.
func NormalizePrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// CheckText rejects a key or reason longer than MaxFieldLen bytes, with
// invalid UTF-8 or with a control character (C0, DEL or C1).
func CheckText(what, s string) error {
	if len(s) > MaxFieldLen {
		return fmt.Errorf("%s is %d bytes, over the limit of %d", what, len(s), MaxFieldLen)
	}
	if i := BadRune(s); i >= 0 {
		return fmt.Errorf("%s has %s at byte %d", what, DescribeByte(s, i), i+1)
	}
	return nil
}

// BadRune returns the byte offset of the first control character or
// invalid UTF-8 sequence in s, or -1.
func BadRune(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return i
			}
		}
		if IsControl(r) {
			return i
		}
	}
	return -1
}

// IsControl reports whether r is a C0 or C1 control character or DEL.
func IsControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// DescribeByte names what is wrong at s[i] without echoing the byte raw.
func DescribeByte(s string, i int) string {
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

// Compare orders two targets as bans are listed: ranges first (IPv4, then
// IPv6, in address order, a shorter range before a longer one at the same
// address), then keys in byte order.
func Compare(ap netip.Prefix, ak string, bp netip.Prefix, bk string) int {
	if (ak != "") != (bk != "") {
		if ak != "" {
			return 1
		}
		return -1
	}
	if ak != "" {
		return cmp.Compare(ak, bk)
	}
	if c := ap.Addr().Compare(bp.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(ap.Bits(), bp.Bits())
}
