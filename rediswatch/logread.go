package rediswatch

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/apigate/ratelimit/access"
)

// needsRecoveryLocked reports whether a marker of epoch means that Redis
// lost its data since this server last knew it: the marker is gone, or
// is of an epoch this server has not merged its knowledge into.
func (b *Bans) needsRecoveryLocked(epoch string) bool {
	return epoch == "" || (b.epoch != "" && epoch != b.epoch && epoch != b.merged)
}

// catchUp applies to the view the changes logged since its version, and
// reports whether it takes a full reload instead: the view is due one,
// Redis lost its data, or the log does not lead from the view's version
// to Redis's.
func (b *Bans) catchUp(ctx context.Context) (full bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.needFull || time.Since(b.lastFull) >= b.cfg.resync {
		return true, nil
	}
	r, err := b.readLog(ctx, b.loaded, b.cursor)
	if err != nil {
		return false, err
	}
	switch {
	case b.needsRecoveryLocked(r.epoch):
		return true, nil
	case r.version == b.loaded:
		return false, nil
	case !r.leads(b.loaded):
		return true, nil
	}
	bl := from(b.view.Load())
	bl.bulk(len(r.entries))
	b.applyLocked(bl, r.entries)
	v := bl.build()
	if v.len() > b.cfg.max {
		return true, nil // a load truncates as WithMax says
	}
	b.view.Store(v)
	b.loaded, b.loadedSeq = r.version, parseSeq(r.version)
	b.cursor = r.entries[len(r.entries)-1].xid
	return false, nil
}

// logPos is where a reload's applyPending reads the log from: a version
// and the stream id of the entry that made it.
type logPos struct {
	version, cursor string
	started, stop   bool
}

// applyPending puts in force, on the view in force, the changes logged
// since p in the epoch of a reload still loading, and moves p past them,
// so that a change made during a long load reaches this server within a
// page of it. It starts where the view is, or, when the view is of an
// epoch before a loss, at the start of the log (a write-back logs
// nothing, so a log lost with the bans holds only the changes since;
// one that was not lost, and so does not lead, stops it). Each run of changes it applies leads, in order,
// to Redis's version, so it leaves each target it touches as Redis's last
// change made it, later than the view had: it brings back nothing lifted.
// The view stays otherwise as it was until install, which applies the
// log again on top of the load from its start. It does nothing before the
// first load or after another loss, and stops once the log does not lead
// from p (install then decides).
func (b *Bans) applyPending(ctx context.Context, epoch string, p *logPos) {
	if p.stop {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.epoch == "" || b.needsRecoveryLocked(epoch) {
		return
	}
	if !p.started {
		p.started, p.cursor = true, "0-0"
		if b.epoch == epoch {
			p.version, p.cursor = b.loaded, b.cursor
		}
	}
	r, err := b.readLog(ctx, p.version, p.cursor)
	if err != nil || r.version == p.version || (len(r.entries) == 0 && !r.over) {
		return
	}
	if p.version == "" && !r.over {
		p.version = r.entries[0].p // the log's start: from its first entry
	}
	if r.epoch != epoch || !r.leads(p.version) {
		p.stop = true
		return
	}
	bl := from(b.view.Load())
	bl.bulk(len(r.entries))
	b.applyLocked(bl, r.entries)
	v := bl.build()
	if v.len() > b.cfg.max {
		p.stop = true // the load truncates as WithMax says
		return
	}
	b.view.Store(v)
	p.version, p.cursor = r.version, r.entries[len(r.entries)-1].xid
}

// applyLocked applies log entries to bl, in order, skipping malformed ones.
func (b *Bans) applyLocked(bl *builder, entries []logEntry) {
	for _, le := range entries {
		if le.err != nil {
			continue
		}
		b.applyOneLocked(bl, le.id, le.seq, le.target, le.ms, le.lift)
	}
}

// applyOneLocked applies one change, numbered seq, of the target named id
// to bl: a lift of target, or a ban of it until ms (0: permanent), and
// records it in the journal.
func (b *Bans) applyOneLocked(bl *builder, id string, seq int64, target access.Entry, ms int64, lift bool) {
	if lift {
		bl.del(target)
		b.journal.record(id, change{seq: seq})
		return
	}
	nb := b.newBanLocked(target, ms)
	bl.put(nb)
	b.expq.add(nb)
	b.journal.record(id, change{seq: seq, ban: nb})
}

// logRead is what poll.lua read.
type logRead struct {
	epoch   string
	version string
	entries []logEntry
	over    bool // more entries than logLen
}

// logEntry is one change read from the log.
type logEntry struct {
	xid, s, p string // its stream id, its sequence number, the one before
	seq       int64
	id        string
	target    access.Entry // the ban (Expires by Redis's clock), or the target lifted
	ms        int64        // Expires in Unix ms, 0 if permanent
	lift      bool
	err       error // why the entry is malformed
}

// leads reports whether the entries lead from version from to r.version,
// each naming the one before it, none malformed.
func (r *logRead) leads(from string) bool {
	if r.over || len(r.entries) == 0 {
		return false
	}
	for _, le := range r.entries {
		if le.err != nil || le.p != from {
			return false
		}
		from = le.s
	}
	return from == r.version
}

// readLog runs poll.lua: the marker's epoch, the version, and the log
// entries after cursor if the version is not since.
func (b *Bans) readLog(ctx context.Context, since, cursor string) (logRead, error) {
	res, err := pollScript.Run(ctx, b.client, []string{b.marker, b.ver, b.log}, since, cursor, logLen, maxLogField).StringSlice()
	if err != nil {
		return logRead{}, fmt.Errorf("rediswatch: reading the log: %w", err)
	}
	if len(res) < 2 || (len(res)-2)%6 != 0 {
		return logRead{}, fmt.Errorf("rediswatch: reading the log: a reply of %d values", len(res))
	}
	r := logRead{epoch: res[0], version: res[1]}
	n := (len(res) - 2) / 6
	if n > logLen {
		r.over = true
		return r, nil
	}
	r.entries = make([]logEntry, n)
	var bad int
	var first logEntry
	for i := range n {
		le := parseLog(res[2+6*i : 8+6*i])
		if le.err != nil {
			if bad == 0 {
				first = le
			}
			bad++
		}
		r.entries[i] = le
	}
	if bad > 0 {
		b.cfg.log().Error("rediswatch: malformed changes in the log; reloading every ban",
			slog.Int("malformed", bad), slog.String("first", clip(first.xid)), slog.Any("error", first.err))
	}
	return r, nil
}

// parseLog reads one log entry: its stream id, s, p, o, i, v.
func parseLog(f []string) logEntry {
	le := logEntry{xid: f[0], s: f[1], p: f[2], id: f[4]}
	seq, err := strconv.ParseInt(le.s, 10, 64)
	if err != nil || seq <= 0 {
		le.err = fmt.Errorf("%w: sequence number %s", errMalformed, clip(le.s))
		return le
	}
	le.seq = seq
	switch f[3] {
	case "u":
		le.lift = true
		le.target, le.err = parseTarget(le.id)
	case "b":
		le.target, le.err = parse(le.id, f[5])
		if le.err == nil && !le.target.Expires.IsZero() {
			le.ms = le.target.Expires.UnixMilli()
		}
	default:
		le.err = fmt.Errorf("%w: change %s", errMalformed, clip(f[3]))
	}
	return le
}
