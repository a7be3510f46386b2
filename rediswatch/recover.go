package rediswatch

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Writing back after a loss (restore_claim.lua, restore.lua,
// restore_done.lua; the package doc says what it guarantees).
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
//
// The writing goes in pages (restorePage entries a script), so that no
// call holds Redis long or nears a client's read timeout, with 100,000
// bans as with ten. A write-back is claimed first: the claim gives its
// server a lease, which each page renews, and the marker is set only
// when its last page is in, so no server loads a half-written set.
// Meanwhile the others wait for the marker (Ban and Unban refuse to
// write while it is gone, and wait too); if the writer stops, its lease
// runs out and the next server takes over, keeping the recovery journal
// written so far. Pages and the calls that end are idempotent, so that
// go-redis may run one again after a timeout.

// Bounds of a write-back.
const (
	// restorePage is how many journal entries or bans one page of a
	// write-back takes: a script that holds Redis a few ms.
	restorePage = 250
	// leaseTime is how long a write-back's lease lasts after its last
	// page: longer than any page takes, short enough that another
	// server soon takes over from one that stopped.
	leaseTime = 3 * time.Second
	// busyWait is how often a server waiting for another's write-back
	// asks whether it is done.
	busyWait = 20 * time.Millisecond
)

// recoverLost writes back or merges what this server knows, if the
// marker says Redis lost its data since this server last read it,
// waiting for another server's write-back to end first. A reload calls
// it before it loads, and a Ban or Unban that found the marker gone
// before it writes: it waits for no load.
func (b *Bans) recoverLost(ctx context.Context) error {
	b.recoverMu.Lock()
	defer b.recoverMu.Unlock()
	for attempt := 0; ; attempt++ {
		done, err := b.recoverOnce(ctx)
		if err != nil || done {
			return err
		}
		if attempt == 2 {
			return fmt.Errorf("rediswatch: writing the bans back: the marker key %q changed under every attempt", b.marker)
		}
	}
}

// recoverOnce runs one write-back or merge, and reports whether it ended
// (false: its lease or its epoch was lost meanwhile; start again).
func (b *Bans) recoverOnce(ctx context.Context) (bool, error) {
	m, err := b.client.HMGet(ctx, b.marker, "e", "r").Result()
	if err != nil {
		return false, fmt.Errorf("rediswatch: reading the marker %q: %w", b.marker, err)
	}
	epoch, _ := m[0].(string)
	b.mu.Lock()
	nothing := epoch != "" && (b.epoch == "" || !b.needsRecoveryLocked(epoch))
	b.mu.Unlock()
	if nothing {
		return true, nil // the first load (nothing known to merge), or merged already
	}
	c, err := b.claim(ctx)
	if err != nil {
		return false, err
	}
	written := 0
	if c.mode == "created" || c.mode == "merged" {
		n, ok, err := b.writeBack(ctx, c)
		if err != nil || !ok {
			return false, err
		}
		written = n
	}
	b.mu.Lock()
	b.merged = c.epoch
	b.needFull = true
	held := b.view.Load().len()
	b.mu.Unlock()
	b.logRecovery(c.mode, held, written)
	return true, nil
}

// claimed is what restore_claim.lua answered.
type claimed struct {
	mode, epoch string
	restored    int64 // -1: Redis knows no change
	token       string
	known       string // the version up to which the bans written are known
}

// claim runs restore_claim.lua until it is not "busy": while another
// server writes back, it waits, within ctx, for the marker.
func (b *Bans) claim(ctx context.Context) (claimed, error) {
	b.mu.Lock()
	known := b.loaded
	epoch := b.epoch
	b.mu.Unlock()
	c := claimed{token: rand.Text(), known: known}
	keys := []string{b.marker, b.rjournal, b.ver, b.lease}
	for {
		res, err := claimScript.Run(ctx, b.client, keys, epoch, parseSeq(known), recoveryWindow.Milliseconds(), c.token, leaseTime.Milliseconds()).StringSlice()
		if err != nil {
			return c, fmt.Errorf("rediswatch: writing the bans back: %w", err)
		}
		if len(res) != 3 {
			return c, fmt.Errorf("rediswatch: writing the bans back: unexpected reply %q", res)
		}
		if res[0] != "busy" {
			c.mode, c.epoch = res[0], res[1]
			c.restored, _ = strconv.ParseInt(res[2], 10, 64)
			return c, nil
		}
		t := time.NewTimer(busyWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return c, fmt.Errorf("rediswatch: waiting for another server to write the bans back: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// restoreItem is one journal entry or ban of a write-back.
type restoreItem struct {
	id    string
	seq   int64 // a journal entry's; 0 for a ban
	value string
	ms    int64
}

// writeBack writes this server's journal and, when it must, its bans, in
// pages, then ends the write-back or merge. It returns how many were
// written, and false if the lease or the epoch was lost meanwhile.
func (b *Bans) writeBack(ctx context.Context, c claimed) (int, bool, error) {
	withBans := c.mode == "created" || parseSeq(c.known) > c.restored
	journal, bans := b.knowledge(withBans)
	owner := c.token
	if c.mode == "merged" {
		owner = c.epoch
	}
	written := 0
	for _, part := range []struct {
		kind  string
		items []restoreItem
	}{{"j", journal}, {"b", bans}} {
		for i := 0; i < len(part.items); i += restorePage {
			n, ok, err := b.restorePage(ctx, c, owner, part.kind, part.items[i:min(i+restorePage, len(part.items))])
			if err != nil || !ok {
				return written, ok, err
			}
			written += n
		}
	}
	known := ""
	if withBans {
		known = strconv.FormatInt(parseSeq(c.known), 10)
	}
	res, err := doneScript.Run(ctx, b.client, []string{b.marker, b.rjournal, b.ver, b.lease}, c.mode, c.token, c.epoch, known).Text()
	if err != nil {
		return written, false, fmt.Errorf("rediswatch: writing the bans back: %w", err)
	}
	return written, res == "ok", nil
}

// restorePage runs restore.lua on one page of items of kind ("j" or "b").
func (b *Bans) restorePage(ctx context.Context, c claimed, owner, kind string, items []restoreItem) (int, bool, error) {
	keys := make([]string, 0, 6+len(items))
	keys = append(keys, b.marker, b.rjournal, b.index, b.ver, b.log, b.lease)
	args := make([]any, 0, 6+4*len(items))
	args = append(args, c.mode, owner, c.restored, logLen, kind, leaseTime.Milliseconds())
	for _, it := range items {
		keys = append(keys, b.banKey+it.id)
		if kind == "j" {
			args = append(args, it.id, it.seq, it.value, it.ms)
		} else {
			args = append(args, it.id, it.value, it.ms)
		}
	}
	res, err := restoreScript.Run(ctx, b.client, keys, args...).StringSlice()
	if err != nil {
		return 0, false, fmt.Errorf("rediswatch: writing the bans back: %w", err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("rediswatch: writing the bans back: unexpected reply %q", res)
	}
	n, _ := strconv.Atoi(res[1])
	return n, res[0] == "ok", nil
}

// knowledge returns this server's journal and, with withBans, the bans it
// holds that have not expired.
func (b *Bans) knowledge(withBans bool) (journal, bans []restoreItem) {
	b.mu.Lock()
	defer b.mu.Unlock()
	journal = make([]restoreItem, 0, len(b.journal.last))
	for id, c := range b.journal.last {
		it := restoreItem{id: id, seq: c.seq}
		if c.ban != nil {
			it.value, it.ms = c.ban.value(), c.ban.ms
		}
		journal = append(journal, it)
	}
	if !withBans {
		return journal, nil
	}
	v := b.view.Load()
	now := b.cfg.now()
	bans = make([]restoreItem, 0, v.len())
	v.each(func(x *ban) bool {
		if liveAt(x.entry, now) {
			bans = append(bans, restoreItem{id: idOf(x.entry), value: x.value(), ms: x.ms})
		}
		return true
	})
	return journal, bans
}

// logRecovery logs what a write-back or merge did.
func (b *Bans) logRecovery(mode string, held, written int) {
	log := b.cfg.log()
	attrs := []any{slog.String("marker", b.marker), slog.Int("held", held), slog.Int("written", written)}
	switch {
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
}
