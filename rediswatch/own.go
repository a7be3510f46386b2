package rediswatch

import (
	"time"

	"github.com/apigate/ratelimit/access"
)

// This server's own changes: put in force here before Ban, BanMany and
// Unban return, in order with the changes the poller applies.

// dropStale lifts here a ban of target that Redis does not hold (its key
// evicted, or deleted by hand) when the view is at Redis's version, so
// that Unban lifts it here before it returns, as it does a ban Redis
// holds. When the view is behind, the poller or the next resync tells.
func (b *Bans) dropStale(id string, target access.Entry, version string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.view.Load()
	if version != b.loaded || v.get(target) == nil {
		return
	}
	bl := from(v)
	bl.del(target)
	b.journal.record(id, change{seq: b.loadedSeq})
	b.view.Store(bl.build())
}

// ownChange is one change this server made, as Redis numbered it.
type ownChange struct {
	id    string
	seq   int64
	entry access.Entry // Expires by Redis's clock
	ms    int64        // Expires in Unix ms, 0 if permanent
	lift  bool
}

// applyOwn puts this server's own changes in force here, at once, so that
// a Ban is in force and an Unban lifted before they return. prev is the
// version before them, xid the stream id of the last, last its sequence
// number. When prev is the view's version the view moves up to last, and
// the poller will not read them again; else the poller applies them again
// in log order with the others' changes between. A change older than
// the one this server already applied to its target (two of its own
// calls racing) is skipped.
func (b *Bans) applyOwn(prev, xid, last string, changes []ownChange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bl := from(b.view.Load())
	bl.bulk(len(changes))
	for _, c := range changes {
		if c.seq <= b.loadedSeq && prev != b.loaded {
			continue // the view holds it, or a later change, already
		}
		if s, ok := b.journal.seen(c.id); ok && s >= c.seq {
			continue
		}
		b.applyOneLocked(bl, c.id, c.seq, c.entry, c.ms, c.lift)
	}
	if prev == b.loaded {
		b.loaded, b.loadedSeq, b.cursor = last, parseSeq(last), xid
	}
	v := bl.build()
	if v.len() > b.cfg.max {
		b.needFull = true // the next load truncates as WithMax says
	}
	b.view.Store(v)
}

// newBanLocked returns the ban of e, whose Expires (ms) is by Redis's
// clock, with Expires by this server's.
func (b *Bans) newBanLocked(e access.Entry, ms int64) *ban {
	if ms != 0 {
		e.Expires = time.UnixMilli(ms).Add(-b.skew)
	}
	return &ban{entry: e, ms: ms}
}
