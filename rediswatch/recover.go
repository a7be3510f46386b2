package rediswatch

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
)

// Writing back after a loss (restore.lua; the package doc says what it
// guarantees).
//
// Design note. The first server to see the marker gone writes its bans
// back; that alone would let a server that had not yet seen an Unban
// made just before the loss bring the ban back, for good. So what is
// merged is not "the bans Redis lacks" but, per target, the latest
// change any server knows: each server's journal holds the sequence
// number of the last change it knows of each recent target (its own,
// the ones it applied from the log, and the ones a full load showed), and
// the recovery journal in Redis holds, per target, the latest merged so
// far. A target missing from the recovery journal is as new as the
// version the bans were written back at (the marker's r): the writer's
// snapshot held every change up to it. A later change wins; an older one
// is dropped. Bans no journal mentions are written where Redis has none
// (SET NX), by the first server and by any that knew a later version
// than it. Every server merges before it takes the restored set, so none
// lifts what it knew or brings back what it knew lifted; a server that
// had not seen a change yet adopts it with the reload that follows.

// recoverLost writes back what this server knows into a Redis that lost
// its data, for a Ban or Unban that found the marker gone; the poller
// reloads next.
func (b *Bans) recoverLost(ctx context.Context) error {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	return b.recoverLocked(ctx)
}

// recoverLocked writes back or merges what this server knows, if the
// marker says Redis lost its data since this server last read it. The
// caller holds reloadMu.
func (b *Bans) recoverLocked(ctx context.Context) error {
	m, err := b.client.HMGet(ctx, b.marker, "e", "r").Result()
	if err != nil {
		return fmt.Errorf("rediswatch: reading the marker %q: %w", b.marker, err)
	}
	epoch, _ := m[0].(string)
	restored, _ := m[1].(string)
	b.mu.Lock()
	if epoch != "" && (b.epoch == "" || !b.needsRecoveryLocked(epoch)) {
		// The first load (nothing known to merge), or merged already.
		b.mu.Unlock()
		return nil
	}
	withBans := epoch == "" || b.loadedSeq > parseSeq(restored)
	keys, args := b.claimLocked(withBans)
	b.mu.Unlock()
	res, err := restoreScript.Run(ctx, b.client, keys, args...).StringSlice()
	if err == nil && len(res) == 3 && res[0] == "retry" {
		// The marker went again since it was read: write the bans back too.
		b.mu.Lock()
		keys, args = b.claimLocked(true)
		b.mu.Unlock()
		res, err = restoreScript.Run(ctx, b.client, keys, args...).StringSlice()
	}
	if err != nil {
		return fmt.Errorf("rediswatch: writing the bans back: %w", err)
	}
	if len(res) != 3 || res[1] == "" {
		return fmt.Errorf("rediswatch: writing the bans back: unexpected reply %q", res)
	}
	written, _ := strconv.Atoi(res[2])
	b.mu.Lock()
	b.merged = res[1]
	b.needFull = true
	held := b.view.Load().len()
	b.mu.Unlock()
	log := b.cfg.log()
	attrs := []any{slog.String("marker", b.marker), slog.Int("held", held), slog.Int("written", written)}
	switch mode := res[0]; {
	case mode == "created" && held == 0 && written == 0:
		log.Info("rediswatch: no marker key in Redis (a new set of bans, or one lost that this server held none of); set it", attrs...)
	case mode == "created":
		log.Warn("rediswatch: Redis lost the bans (their marker key is gone); wrote back the ones this server held", attrs...)
	case mode == "marked":
		log.Warn("rediswatch: the marker key was gone, but Redis still knows every change this server does; set the marker again", attrs...)
	case mode == "merged":
		log.Warn("rediswatch: Redis lost the bans, and another server wrote them back; merged the changes this server knew later", attrs...)
	case mode == "late":
		log.Warn("rediswatch: Redis lost the bans, and the recovery journal is gone: too late to merge what this server knew", attrs...)
	}
	return nil
}

// claimLocked returns the KEYS and ARGV of restore.lua: this server's
// journal and, with withBans, the bans it holds that have not expired.
func (b *Bans) claimLocked(withBans bool) ([]string, []any) {
	v := b.view.Load()
	n := len(b.journal.last)
	if withBans {
		n += v.len()
	}
	keys := make([]string, 0, 5+n)
	keys = append(keys, b.marker, b.rjournal, b.index, b.ver, b.log)
	args := make([]any, 0, 6+4*n)
	flag := "0"
	if withBans {
		flag = "1"
	}
	args = append(args, b.epoch, b.loaded, recoveryWindow.Milliseconds(), flag, len(b.journal.last), logLen)
	for id, c := range b.journal.last {
		keys = append(keys, b.banKey+id)
		if c.ban == nil {
			args = append(args, id, c.seq, "", 0)
		} else {
			args = append(args, id, c.seq, c.ban.value(), c.ban.ms)
		}
	}
	if withBans {
		now := b.cfg.now()
		v.each(func(x *ban) bool {
			if liveAt(x.entry, now) {
				id := idOf(x.entry)
				keys = append(keys, b.banKey+id)
				args = append(args, id, x.value(), x.ms)
			}
			return true
		})
	}
	return keys, args
}
