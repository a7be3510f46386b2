package reputation

import (
	"context"
	"fmt"
	"time"
)

// Signal is a kind of behaviour a Tracker scores.
type Signal uint8

const (
	// Denied: a request a limit denied (429). Weight 1 by default.
	Denied Signal = 1 + iota
	// LockedOut: a request a lockout refused. Weight 3 by default.
	LockedOut
	// DenyListed: a request of a deny-listed client (403), a ban's
	// included. Weight 1 by default.
	DenyListed
	// Refused: a 401 or 403 answer of the handler (a wrong password, a
	// bad token). Weight 1 by default.
	Refused
	// Unrouted: a 404 for a path no route serves, as scanners ask.
	// Weight 1 by default.
	Unrouted
	// NotFound: a 404 on a route that exists (a resource missing, as
	// WebDAV and file-sync clients ask all day). Weight 0 by default.
	NotFound
	// Reported: bad behaviour the application reports with Penalize (a
	// failed captcha, a honeypot route), of the weight it gives.
	Reported
)

// defaultWeights are the signals' weights when Config.Weights does not
// say.
var defaultWeights = [...]float64{Denied: 1, LockedOut: 3, DenyListed: 1, Refused: 1, Unrouted: 1, NotFound: 0, Reported: 0}

// signalNames are the signals' names, as metrics label them.
var signalNames = [...]string{Denied: "denied", LockedOut: "locked_out", DenyListed: "deny_listed", Refused: "refused",
	Unrouted: "unrouted", NotFound: "not_found", Reported: "reported"}

// String returns the signal's name, as metrics label it ("denied",
// "locked_out", ...).
func (s Signal) String() string {
	if s >= Denied && s <= Reported {
		return signalNames[s]
	}
	return fmt.Sprintf("Signal(%d)", uint8(s))
}

// Record scores signal s, of its weight (Config.Weights), against the
// client key: what the HTTP flow calls for what it sees. A NotFound on a
// context MarkUnrouted marked counts as Unrouted; an unknown signal
// counts as nothing. ctx bounds the writes to shared scores and bans.
func (t *Tracker) Record(ctx context.Context, key string, s Signal) {
	if s >= Denied && s <= Reported {
		t.signal(ctx, key, marked(ctx, s), -1)
	}
}

// Score returns key's score, as this server holds it.
func (t *Tracker) Score(key string) float64 {
	return t.scores.Get(key, t.now())
}

// signal scores s, of weight w (the signal's own when w < 0), for key at
// now, and acts on the band it takes key into: a ban band bans it, for
// its offences' length.
func (t *Tracker) signal(ctx context.Context, key string, s Signal, w float64) {
	if w < 0 {
		w = t.weights[s]
	}
	if w == 0 || key == "" {
		return
	}
	t.signals[s].Add(1)
	now := t.now()
	before := t.scores.Get(key, now)
	v, err := t.scores.Add(ctx, key, w, now)
	if err != nil {
		t.log.Warn("reputation: scoring failed", "key", key, "signal", s, "error", err)
		return
	}
	if rs, ok := t.scores.(*shared); ok {
		if shared, ok := rs.Sync(ctx, key); ok {
			v = shared // every server's signals: this one may cross a band they took the client near
		}
	}
	if t.scales && v > t.scaleFrom {
		t.suspect(key, now)
	}
	from, to := t.band(before), t.band(v)
	acted := false
	name := ""
	if to >= 0 {
		name = t.bands[to].Name
	}
	// A client in a band that bans is banned unless it is already: as it
	// enters the band, and again at its first bad signal once a ban has
	// ended while its score is still that high.
	for i := to; i >= 0; i-- {
		if !t.bands[i].Ban {
			continue
		}
		if to > from || !t.bannedNow(key) {
			acted = t.ban(ctx, key, i)
		}
		break
	}
	if t.onOutcome != nil {
		t.onOutcome(key, s, v, name, acted)
	}
}

// sharedScore acts on key's score as a flush of the shared scores read it,
// before (this server's copy) and after (the score every server's signals
// made): a client other servers' signals took above a band that scales
// is scaled here too, and one they took into a band that bans is banned,
// if its ban is not in force yet.
func (t *Tracker) sharedScore(key string, before, after float64) {
	now := t.now()
	if t.scales && after > t.scaleFrom {
		t.suspect(key, now)
	}
	from, to := t.band(before), t.band(after)
	if to <= from {
		return
	}
	for i := to; i >= 0; i-- {
		if t.bands[i].Ban {
			if !t.bannedNow(key) {
				t.ban(context.Background(), key, i)
			}
			return
		}
	}
}

// flushFailed logs a failed flush of the scores to Redis, at most once
// per logEvery: the scores are still counted in this server's copy.
func (t *Tracker) flushFailed(err error) {
	now := time.Now().UnixNano()
	last := t.lastLog.Load()
	if now-last < int64(logEvery) || !t.lastLog.CompareAndSwap(last, now) {
		return
	}
	t.log.Warn("reputation: sharing scores through Redis failed; they count on this server meanwhile", "error", err)
}

// logEvery bounds how often a failing Redis is logged.
const logEvery = 10 * time.Second
