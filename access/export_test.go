package access

import "time"

// SetBansClock makes b read the time from now, for tests.
func SetBansClock(b *Bans, now func() time.Time) { b.now = now }
