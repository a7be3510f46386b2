package access

import (
	"errors"
	"time"
)

// SetBansClock makes b read the time from now, for tests.
func SetBansClock(b *Bans, now func() time.Time) { b.now = now }

// The bounds of the package, documented by value, for tests.
const (
	MaxFieldLen  = maxFieldLen
	MaxLines     = maxLines
	MaxLineLen   = maxLineLen
	MaxFileBytes = maxFileBytes
)

// Position returns the line and byte column a parse error names, and
// whether err is one.
func Position(err error) (line, column int, ok bool) {
	var pe *parseError
	if !errors.As(err, &pe) {
		return 0, 0, false
	}
	return pe.line, pe.column, true
}

// Size returns the number of distinct ranges and keys of l.
func Size(l *List) int { return l.size() }
