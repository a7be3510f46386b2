package rediswatch

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// reload loads every ban from Redis and puts them in force, after writing
// back what this server knows if Redis lost its data.
func (b *Bans) reload(ctx context.Context) error {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	for attempt := 0; ; attempt++ {
		s, err := b.load(ctx)
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
		if err := b.recoverLocked(ctx); err != nil {
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
	// bans holds the bans read, their Expires by Redis's clock, in one
	// slice: one allocation, not one a ban, which a view keeps until
	// every one of them has left it.
	bans      []ban
	skew      time.Duration // Redis's clock minus ours, as measured
	truncated bool          // Redis held more than WithMax
}

// load reads every ban from Redis: the index (load.lua), then the bans.
func (b *Bans) load(ctx context.Context) (loaded, error) {
	start := b.cfg.now()
	reply, err := loadScript.Run(ctx, b.client, []string{b.index, b.ver, b.log, b.marker}, b.cfg.max).Slice()
	elapsed := b.cfg.now().Sub(start)
	if err != nil {
		return loaded{}, fmt.Errorf("rediswatch: loading the index: %w", err)
	}
	if len(reply) < 6 || len(reply)%2 != 0 {
		return loaded{}, fmt.Errorf("rediswatch: loading the index: a reply of %d values", len(reply))
	}
	version, _ := reply[0].(string)
	nowStr, _ := reply[1].(string)
	nowMS, err := strconv.ParseInt(nowStr, 10, 64)
	if err != nil {
		return loaded{}, fmt.Errorf("rediswatch: loading the index: Redis's time %q", nowStr)
	}
	live, _ := reply[2].(int64)
	s := loaded{version: version, skew: time.UnixMilli(nowMS).Sub(start.Add(elapsed / 2))}
	s.epoch, _ = reply[3].(string)
	s.restored, _ = reply[4].(string)
	s.cursor, _ = reply[5].(string)

	ids := make([]string, 0, (len(reply)-6)/2)
	for i := 6; i+1 < len(reply); i += 2 {
		id, _ := reply[i].(string)
		ids = append(ids, id)
	}
	values := make([]any, 0, len(ids))
	pipe := b.client.Pipeline()
	cmds := make([]*redis.SliceCmd, 0, len(ids)/mgetChunk+1)
	for i := 0; i < len(ids); i += mgetChunk {
		keys := make([]string, 0, mgetChunk)
		for _, id := range ids[i:min(i+mgetChunk, len(ids))] {
			keys = append(keys, b.banKey+id)
		}
		cmds = append(cmds, pipe.MGet(ctx, keys...))
	}
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return loaded{}, fmt.Errorf("rediswatch: loading the bans: %w", err)
		}
	}
	for _, c := range cmds {
		values = append(values, c.Val()...)
	}
	if len(values) != len(ids) {
		return loaded{}, fmt.Errorf("rediswatch: loading the bans: %d values for %d ids", len(values), len(ids))
	}

	var (
		skipped  int
		firstBad string
		firstWhy error
		bans     = make([]ban, 0, len(ids))
		nowRedis = time.UnixMilli(nowMS)
	)
	s.truncated = live > int64(len(ids))
	for i, id := range ids {
		if values[i] == nil {
			continue // expired, evicted or unbanned since the index was read
		}
		v, _ := values[i].(string)
		e, err := parse(id, v)
		if err != nil {
			if skipped == 0 {
				firstBad, firstWhy = id, err
			}
			skipped++
			continue
		}
		if liveAt(e, nowRedis) {
			nb := ban{entry: e}
			if !e.Expires.IsZero() {
				nb.ms = e.Expires.UnixMilli()
			}
			bans = append(bans, nb)
		}
	}
	if skipped > 0 {
		b.cfg.log().Error("rediswatch: skipped malformed bans in Redis",
			slog.Int("skipped", skipped), slog.String("first", clip(firstBad)), slog.Any("error", firstWhy))
	}
	if s.truncated {
		b.cfg.log().Warn("rediswatch: more bans in Redis than WithMax; loaded the permanent ones, then those that expire last",
			slog.Int64("in_redis", live), slog.Int("loaded", len(ids)))
	}
	s.bans = bans
	return s, nil
}
