package access

import "time"

// SetBansClock makes b read the time from now, for tests.
func SetBansClock(b *Bans, now func() time.Time) { b.now = now }

// The bounds of the package, documented by value, for tests.
const (
	MaxFieldLen  = maxFieldLen
	MaxLines     = maxLines
	MaxLineLen   = maxLineLen
	MaxFileBytes = maxFileBytes
)

// Column returns the byte column e names in its message.
func Column(e *ParseError) int { return e.column }

// Size returns the number of distinct ranges and keys of l.
func Size(l *List) int { return l.size() }
