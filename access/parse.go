package access

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of the line format. A file past them is an error, never a
// truncated list. They bound what a file can make a process hold: a list
// of a million lines (the largest the issue asks for, twice over) loads
// in about two seconds and some 300 MB on one core; a file past them is
// far more likely a mistake (a wrong path, a log file, a runaway
// generator) than a list. The package doc gives their values.
const (
	// maxLines is the most lines, comments and blank lines included, that
	// Parse reads: twice the million-line lists that must load.
	maxLines = 2_000_000
	// maxLineLen is the longest line, in bytes, without its line ending:
	// room for a key and a reason of maxFieldLen bytes each, the fields
	// and a comment, so that no valid entry is refused, while a line
	// buffer stays small.
	maxLineLen = 4096
	// maxFileBytes is the most bytes that Parse reads.
	maxFileBytes = 256 << 20
)

// ErrTooLarge reports input past a bound of this package: a list's text
// with a line over 4,096 bytes, more than 2,000,000 lines or more than
// 256 MiB (the error names the line), or a Ban that would make a [Bans]
// hold more than its maximum. The error's text says which bound.
var ErrTooLarge = errors.New("access: too large")

// parseError reports where a list's text is malformed: its line, counted
// from 1, and byte column, in the message. It unwraps to an error wrapping
// ErrInvalidEntry or ErrTooLarge, or to the reader's error.
type parseError struct {
	line   int
	column int
	err    error
}

// Error formats the position and the cause.
func (e *parseError) Error() string {
	return fmt.Sprintf("line %d, column %d: %v", e.line, e.column, e.err)
}

// Unwrap returns the cause.
func (e *parseError) Unwrap() error { return e.err }

// ParseEntry parses one entry in the line format described in the package
// doc, for example "203.0.113.7", "2001:db8::/32 # comment", "user:42" or
// "key:9f86d0... expires=2026-12-31T00:00:00Z reason=leaked". A string
// with no entry (blank or only a comment) is an error, as is anything
// Parse rejects in a line. The error names line 1 and the column.
func ParseEntry(s string) (Entry, error) {
	s = strings.TrimSuffix(s, "\r")
	if len(s) > maxLineLen {
		return Entry{}, &parseError{line: 1, column: maxLineLen + 1, err: fmt.Errorf("%w: a line over %d bytes", ErrTooLarge, maxLineLen)}
	}
	e, ok, col, err := parseLine(s)
	if err == nil && !ok {
		col, err = 1, invalid("empty entry: no address, range or key")
	}
	if err != nil {
		return Entry{}, &parseError{line: 1, column: col, err: err}
	}
	return e, nil
}

// Parse reads entries in the line format, one a line; blank lines and
// comments are skipped. It stops at the first malformed line and returns
// an error naming its line and column, and no entries, or the reader's error wrapped
// in one. Past 2,000,000 lines, 4,096 bytes in a line or 256 MiB in all,
// it stops with an error wrapping ErrTooLarge.
func Parse(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxFileBytes+1))
	sc.Buffer(make([]byte, 0, maxLineLen+2), maxLineLen+2)
	var (
		entries []Entry
		line    int
		read    int64
	)
	for sc.Scan() {
		line++
		if line > maxLines {
			return nil, &parseError{line: line, column: 1, err: fmt.Errorf("%w: more than %d lines", ErrTooLarge, maxLines)}
		}
		b := sc.Bytes()
		read += int64(len(b)) + 1
		if read > maxFileBytes+1 {
			return nil, &parseError{line: line, column: 1, err: fmt.Errorf("%w: a file over %d bytes", ErrTooLarge, maxFileBytes)}
		}
		if len(b) > maxLineLen {
			return nil, &parseError{line: line, column: maxLineLen + 1, err: fmt.Errorf("%w: a line over %d bytes", ErrTooLarge, maxLineLen)}
		}
		e, ok, col, err := parseLine(string(b))
		if err != nil {
			return nil, &parseError{line: line, column: col, err: err}
		}
		if ok {
			entries = append(entries, e)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("%w: a line over %d bytes", ErrTooLarge, maxLineLen)
			return nil, &parseError{line: line + 1, column: maxLineLen + 1, err: err}
		}
		return nil, &parseError{line: line + 1, column: 1, err: err}
	}
	if read > maxFileBytes {
		return nil, &parseError{line: line, column: 1, err: fmt.Errorf("%w: a file over %d bytes", ErrTooLarge, maxFileBytes)}
	}
	return entries, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidEntry}, args...)...)
}

// parseLine parses one line without its line ending. ok is false for a
// blank or comment-only line; col is the 1-based byte column of an error.
func parseLine(s string) (e Entry, ok bool, col int, err error) {
	for i, r := range s {
		if r == '\t' {
			continue
		}
		if isControl(r) || r == utf8.RuneError && badRune(s[i:]) == 0 {
			return Entry{}, false, i + 1, invalid("%s", describeByte(s, i))
		}
	}
	// Cut the comment: a '#' at the start or after a blank.
	for i := 0; i < len(s); i++ {
		if s[i] == '#' && (i == 0 || isBlank(s[i-1])) {
			s = s[:i]
			break
		}
	}
	pos := skipBlanks(s, 0)
	if pos == len(s) {
		return Entry{}, false, 0, nil
	}
	end := nextBlank(s, pos)
	target := s[pos:end]
	if hasField(target) {
		return Entry{}, false, pos + 1, invalid("empty entry: no address, range or key before %q", fieldName(target))
	}
	if e, err = parseTarget(target); err != nil {
		return Entry{}, false, pos + 1, err
	}
	for pos = skipBlanks(s, end); pos < len(s); pos = skipBlanks(s, end) {
		end = nextBlank(s, pos)
		field := s[pos:end]
		switch {
		case strings.HasPrefix(field, "expires="):
			if !e.Expires.IsZero() {
				return Entry{}, false, pos + 1, invalid("expires= given twice")
			}
			v := field[len("expires="):]
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return Entry{}, false, pos + 1, invalid("expires=%s is not an RFC 3339 time such as 2026-12-31T00:00:00Z", clip(v))
			}
			e.Expires = t
		case strings.HasPrefix(field, "reason="):
			reason := strings.TrimRight(s[pos+len("reason="):], " \t")
			if reason == "" {
				return Entry{}, false, pos + 1, invalid("reason= with no text")
			}
			if len(reason) > maxFieldLen {
				return Entry{}, false, pos + 1, invalid("reason is %d bytes, over the limit of %d", len(reason), maxFieldLen)
			}
			// A tab separates fields but is a control character in the
			// text of an Entry: NewList would reject it, without a line.
			if i := strings.IndexByte(reason, '\t'); i >= 0 {
				return Entry{}, false, pos + len("reason=") + i + 1, invalid("a tab in the reason (write spaces)")
			}
			e.Reason = strings.Clone(reason)
			end = len(s)
		default:
			return Entry{}, false, pos + 1, invalid("unexpected %s after the target (fields are expires= and reason=)", clip(field))
		}
	}
	return e, true, 0, nil
}

// parseTarget parses an address, a range or a key.
func parseTarget(t string) (Entry, error) {
	if isKey(t) {
		if len(t) > maxFieldLen {
			return Entry{}, invalid("key is %d bytes, over the limit of %d", len(t), maxFieldLen)
		}
		return Entry{Key: strings.Clone(t)}, nil
	}
	if strings.Contains(t, "/") {
		p, err := netip.ParsePrefix(t)
		if err != nil {
			return Entry{}, invalid("bad range %s: %v", clip(t), unwrapNetip(err))
		}
		if m := p.Masked(); m != p {
			return Entry{}, invalid("range %s has host bits set (the range is %s)", p, m)
		}
		return Entry{Prefix: normalizePrefix(p)}, nil
	}
	a, err := netip.ParseAddr(t)
	if err != nil {
		if n := strings.Count(t, ":"); n == 0 && strings.Trim(t, "0123456789.") != "" || n == 1 && !strings.Contains(t, "::") {
			return Entry{}, invalid("%s is not an address, range or key (a key is name:value, such as user:42, with a name not all hex digits)", clip(t))
		}
		return Entry{}, invalid("bad address %s: %v", clip(t), unwrapNetip(err))
	}
	if a.Zone() != "" {
		return Entry{}, invalid("address %s has an IPv6 zone; zones are not allowed", clip(t))
	}
	a = a.Unmap()
	return Entry{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
}

// isKey reports whether t has the form name:value with a name of letters,
// digits, '_', '-' and '.' that is not all hex digits (which would be the
// start of an IPv6 address) and a non-empty value.
func isKey(t string) bool {
	name, value, found := strings.Cut(t, ":")
	if !found || name == "" || value == "" {
		return false
	}
	hex := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		case c >= 'g' && c <= 'z', c >= 'G' && c <= 'Z', c == '_', c == '-':
			hex = false
		case c == '.':
			// allowed in a name; "1.2.3.4:80"-like text is not a key either
		default:
			return false
		}
	}
	return !hex
}

// unwrapNetip drops the "netip.ParsePrefix(...)" prefix that repeats the
// input.
func unwrapNetip(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "): "); i >= 0 {
		return msg[i+3:]
	}
	return msg
}

func hasField(s string) bool {
	return strings.HasPrefix(s, "expires=") || strings.HasPrefix(s, "reason=")
}

func fieldName(s string) string {
	name, _, _ := strings.Cut(s, "=")
	return name + "="
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func skipBlanks(s string, i int) int {
	for i < len(s) && isBlank(s[i]) {
		i++
	}
	return i
}

func nextBlank(s string, i int) int {
	for i < len(s) && !isBlank(s[i]) {
		i++
	}
	return i
}

// clip quotes s for an error message, cut to 64 bytes.
func clip(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q...", s[:64])
	}
	return fmt.Sprintf("%q", s)
}
