package rediswatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"
)

// reload loads every ban from Redis and puts them in force, after writing
// back what this server knows if Redis lost its data.
func (b *Bans) reload(ctx context.Context) error {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	// Recover first when the marker says so, rather than load what a
	// lost Redis holds and load again.
	if err := b.recoverLost(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		s, err := b.load(ctx, true)
		if err != nil {
			return err
		}
		b.mu.Lock()
		lost := b.needsRecoveryLocked(s.epoch)
		b.mu.Unlock()
		if !lost {
			return b.install(ctx, s)
		}
		if attempt > 0 {
			return fmt.Errorf("rediswatch: the marker key %q is gone again just after writing the bans back", b.marker)
		}
		if err := b.recoverLost(ctx); err != nil {
			return err
		}
	}
}

// install makes the bans of a load the view, with the changes logged
// since the load began applied, and records in the journal what the load
// changed.
func (b *Bans) install(ctx context.Context, s loaded) error {
	skew := s.skew
	if skew > -minSkew && skew < minSkew {
		skew = 0
	}
	bl := fresh()
	var expiring expiry
	for i := range s.bans {
		nb := &s.bans[i] // the load's own: not in a view yet
		if nb.ms != 0 {
			nb.entry.Expires = time.UnixMilli(nb.ms).Add(-skew)
			expiring = append(expiring, nb)
		}
		bl.put(nb)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Under mu, so that no change of this server's own slips between the
	// read of the log and the new view.
	r, err := b.readLog(ctx, s.version, s.cursor)
	if err != nil {
		return err
	}
	if b.epoch != "" {
		b.diffLocked(b.view.Load(), &bl.v, parseSeq(s.version), s.truncated)
	}
	b.skew = skew
	expiring.init()
	b.expq = expiring // the stale bans of the last view go with it
	version, cursor := s.version, s.cursor
	full := false
	if r.epoch == s.epoch && r.version != s.version {
		b.applyLocked(bl, r.entries)
		full = !r.leads(s.version)
		version = r.version
		if len(r.entries) > 0 {
			cursor = r.entries[len(r.entries)-1].xid
		}
	}
	v := bl.build()
	b.view.Store(v)
	b.epoch, b.loaded, b.loadedSeq, b.cursor = s.epoch, version, parseSeq(version), cursor
	b.lastFull, b.needFull = time.Now(), full
	return nil
}

// diffLocked records in the journal the changes a load found: bans new or
// changed, and bans lifted (unless the load was truncated).
func (b *Bans) diffLocked(old, next *view, seq int64, truncated bool) {
	next.each(func(nb *ban) bool {
		if ob := old.get(nb.entry); ob == nil || ob.ms != nb.ms || ob.entry.Reason != nb.entry.Reason {
			b.journal.record(idOf(nb.entry), change{seq: seq, ban: nb})
		}
		return true
	})
	if truncated {
		return
	}
	now := b.cfg.now()
	old.each(func(ob *ban) bool {
		if liveAt(ob.entry, now) && next.get(ob.entry) == nil {
			b.journal.record(idOf(ob.entry), change{seq: seq})
		}
		return true
	})
}

// loaded is what one load read.
type loaded struct {
	version  string
	epoch    string // the marker's, "" if it is gone
	restored string // the marker's version written back at
	cursor   string // the log's last entry at the load
	nowMS    int64  // Redis's time at the load's start, Unix ms
	// bans holds the bans read, their Expires by Redis's clock, in one
	// slice: one allocation, not one a ban, which a view keeps until
	// every one of them has left it.
	bans      []ban
	skew      time.Duration // Redis's clock minus ours, as measured
	truncated bool          // Redis held more than WithMax
}

// load reads every ban from Redis: where it starts (load.lua), then the
// index in pages (page.lua: a ZSCAN and the bans it names). Every call is
// small (about loadPage ids), so none comes near a client's read timeout
// and none holds Redis for long, however many bans there are. The pages are
// not one snapshot: a ban made, changed or lifted while they are read
// may be missed or read twice, but it is in the log after the cursor
// load.lua read, which install applies on top, so the view is Redis's at
// the end of the load. Every call reads only: go-redis may retry any.
//
// With pending (a reload, not List), the changes logged meanwhile are
// also put in force before each page, on the view in force
// (applyPending), so that a ban made during a load that takes seconds
// reaches this server within a page, not at its end.
func (b *Bans) load(ctx context.Context, pending bool) (loaded, error) {
	s, live, floor, err := b.loadStart(ctx)
	if err != nil {
		return loaded{}, err
	}
	s.truncated = live > int64(b.cfg.max)
	held := int(min(live, int64(b.cfg.max)))
	r := pageReader{now: time.UnixMilli(s.nowMS), seen: make(map[string]struct{}, held)}
	// One slice for every ban: a view keeps it until each has left.
	r.bans = make([]ban, 0, held+held/16)
	keys := []string{b.index}
	now, from, cursor := strconv.FormatInt(s.nowMS, 10), strconv.FormatFloat(floor, 'g', -1, 64), "0"
	var p logPos
	for {
		if pending {
			b.applyPending(ctx, s.epoch, &p)
		}
		reply, err := b.readPage(ctx, keys, cursor, now, from)
		if err != nil {
			return loaded{}, fmt.Errorf("rediswatch: loading the bans: %w", err)
		}
		if len(reply)%2 != 1 {
			return loaded{}, fmt.Errorf("rediswatch: loading the bans: a reply of %d values", len(reply))
		}
		r.page(reply[1:])
		if b.cfg.page != nil {
			b.cfg.page()
		}
		if cursor = reply[0]; cursor == "0" {
			break
		}
	}
	if r.skipped > 0 {
		b.cfg.log().Error("rediswatch: skipped malformed bans in Redis",
			slog.Int("skipped", r.skipped), slog.String("first", clip(r.firstBad)), slog.Any("error", r.firstWhy))
	}
	if s.truncated {
		r.keepTop(b.cfg.max)
		b.cfg.log().Warn("rediswatch: more bans in Redis than WithMax; loaded the permanent ones, then those that expire last",
			slog.Int64("in_redis", live), slog.Int("loaded", len(r.bans)))
	}
	s.bans = r.bans
	return s, nil
}

// readPage runs page.lua, again after a timeout (a page only reads, and
// one slow reply should not throw away the pages read before it), at
// most pageTries times in all.
func (b *Bans) readPage(ctx context.Context, keys []string, cursor, now, floor string) ([]string, error) {
	for try := 1; ; try++ {
		reply, err := pageScript.Run(ctx, b.client, keys, cursor, loadPage, now, floor, b.banKey).StringSlice()
		var ne net.Error
		if err == nil || try == pageTries || ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() {
			return reply, err
		}
	}
}

// loadStart runs load.lua: what a load starts from, how many bans are
// live, and the least score a load takes (-inf unless truncated).
func (b *Bans) loadStart(ctx context.Context) (s loaded, live int64, floor float64, err error) {
	start := b.cfg.now()
	reply, err := loadScript.Run(ctx, b.client, []string{b.index, b.ver, b.log, b.marker}, b.cfg.max).StringSlice()
	elapsed := b.cfg.now().Sub(start)
	if err != nil {
		return s, 0, 0, fmt.Errorf("rediswatch: loading the index: %w", err)
	}
	if len(reply) != 7 {
		return s, 0, 0, fmt.Errorf("rediswatch: loading the index: a reply of %d values", len(reply))
	}
	nowMS, err1 := strconv.ParseInt(reply[1], 10, 64)
	live, err2 := strconv.ParseInt(reply[2], 10, 64)
	floor, err3 := strconv.ParseFloat(reply[6], 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return s, 0, 0, fmt.Errorf("rediswatch: loading the index: unexpected reply %q", reply)
	}
	s = loaded{version: reply[0], nowMS: nowMS, skew: time.UnixMilli(nowMS).Sub(start.Add(elapsed / 2))}
	s.epoch, s.restored, s.cursor = reply[3], reply[4], reply[5]
	return s, live, floor, nil
}

// pageReader gathers the bans of a load, page by page.
type pageReader struct {
	now  time.Time // Redis's, when the load began
	seen map[string]struct{}
	bans []ban

	skipped  int
	firstBad string
	firstWhy error
}

// page adds the bans of one page.lua reply (id, value, ...) not read
// yet that are live at the load's start.
func (r *pageReader) page(pairs []string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		id := pairs[i]
		if _, ok := r.seen[id]; ok {
			continue // ZSCAN returns an id more than once while Redis rehashes
		}
		r.seen[id] = struct{}{}
		e, err := parse(id, pairs[i+1])
		if err != nil {
			if r.skipped == 0 {
				r.firstBad, r.firstWhy = id, err
			}
			r.skipped++
			continue
		}
		if liveAt(e, r.now) {
			nb := ban{entry: e}
			if !e.Expires.IsZero() {
				nb.ms = e.Expires.UnixMilli()
			}
			r.bans = append(r.bans, nb)
		}
	}
}

// keepTop keeps the n bans a truncated load takes: the permanent ones,
// then those that expire last (ties at the floor, and bans made during
// the load, may make more).
func (r *pageReader) keepTop(n int) {
	if len(r.bans) <= n {
		return
	}
	slices.SortFunc(r.bans, func(x, y ban) int {
		switch {
		case x.ms == y.ms:
			return 0
		case x.ms == 0:
			return -1
		case y.ms == 0:
			return 1
		case x.ms > y.ms:
			return -1
		}
		return 1
	})
	r.bans = r.bans[:n]
}
