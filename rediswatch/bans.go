package rediswatch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/accessentry"
)

var (
	//go:embed ban.lua
	banLua string
	//go:embed unban.lua
	unbanLua string
	//go:embed load.lua
	loadLua string
	//go:embed poll.lua
	pollLua string
	//go:embed restore.lua
	restoreLua string

	banScript     = redis.NewScript(banLua)
	unbanScript   = redis.NewScript(unbanLua)
	loadScript    = redis.NewScript(loadLua)
	pollScript    = redis.NewScript(pollLua)
	restoreScript = redis.NewScript(restoreLua)
)

// Bounds of the calls the poller makes, and of the log.
const (
	// loadTimeout bounds a full load from the poller.
	loadTimeout = 10 * time.Second
	// mgetChunk is how many bans one MGET of a load reads.
	mgetChunk = 1000
	// minSkew is the least clock skew from Redis that the snapshot
	// corrects for; below it the measure is mostly round-trip noise.
	minSkew = 100 * time.Millisecond
	// logLen is about how many changes the log keeps (XADD MAXLEN ~), and
	// the most a poll applies: a server further behind reloads.
	logLen = 10_000
	// maxBatch is the most entries one BanMany takes: one script that
	// long holds Redis about 10 ms, and the fields of its log entry (four
	// a ban) stay within the 8,000 values Lua's unpack takes.
	maxBatch = 1000
	// maxLogField is the longest log field a poll takes (a key or a reason
	// is at most accessentry.MaxFieldLen bytes); a longer one is refused.
	maxLogField = accessentry.MaxFieldLen + 64
	// recoveryWindow is how long the recovery journal lives after a loss:
	// a server that sees the loss later merges nothing.
	recoveryWindow = 10 * time.Minute
)

// Bans is a set of bans shared through Redis; see the package doc. It is
// safe for concurrent use. Close stops its poller.
type Bans struct {
	client redis.UniversalClient
	cfg    config
	// The keys; see the package doc.
	index, ver, log, marker, rjournal, banKey string

	view atomic.Pointer[view]

	// reloadMu serializes full loads and writing back; it is taken before
	// mu, never while holding it.
	reloadMu sync.Mutex

	// mu guards the fields below. It is held for work in memory and for
	// the poller's read of the log (one small round trip), never for a
	// full load, so that Ban and Unban wait for no reload.
	mu        sync.Mutex
	epoch     string        // the marker's epoch the view was loaded in; "" before the first load
	merged    string        // the epoch this server's knowledge was last merged into
	loaded    string        // the version the view is up to
	loadedSeq int64         // loaded as a number, 0 if it is none
	cursor    string        // the stream id of the last log entry the view is up to
	skew      time.Duration // Redis's clock minus ours, as corrected for
	lastFull  time.Time     // when the view was last loaded in full
	needFull  bool          // the next poll loads in full
	expq      expiry
	journal   journal

	loop loop
}

var _ access.Matcher = (*Bans)(nil)

// bansKind is what a Bans takes of the options.
var bansKind = kind{
	name: "NewBans", key: "ratelimit:bans", checkKey: checkPrefix,
	poll: 200 * time.Millisecond, most: time.Minute,
	max: 100_000, top: 1_000_000,
}

// checkPrefix refuses a Bans key with a brace: it is a hash tag itself.
func checkPrefix(key string) error {
	if i := strings.IndexAny(key, "{}"); i >= 0 {
		return fmt.Errorf("%q at byte %d; a Bans key is a hash tag itself, and holds no brace", key[i], i)
	}
	return nil
}

// NewBans returns a Bans over the Redis behind client (a *redis.Client, a
// *redis.ClusterClient or any other redis.UniversalClient), which it does
// not own: closing it is the caller's business. NewBans loads every ban
// before it returns, within ctx (give it a deadline: a go-redis client
// bounds a call by ctx only with ContextTimeoutEnabled, else by its
// ReadTimeout), so a server that starts (or restarts) enforces the bans
// already made; then it starts the poller, which ctx does not stop
// (Close does). It sets the marker (see the package doc) if none exists.
// A nil client, or an option nil or refusing its value, is an error
// wrapping core.ErrInvalidOption; a first load that fails (Redis
// unreachable) is an error too, and nothing is started: call NewBans
// again.
func NewBans(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Bans, error) {
	cfg, err := configure(bansKind, client, opts)
	if err != nil {
		return nil, err
	}
	tag := "{" + cfg.key + "}:"
	b := &Bans{
		client:   client,
		cfg:      cfg,
		index:    tag + "i",
		ver:      tag + "v",
		log:      tag + "l",
		marker:   tag + "m",
		rjournal: tag + "j",
		banKey:   tag + "b:",
		cursor:   "0-0",
	}
	b.view.Store(emptyView)
	if err := b.reload(ctx); err != nil {
		return nil, fmt.Errorf("rediswatch.NewBans: loading the bans: %w", err)
	}
	b.loop.start(cfg.poll, b.poll)
	return b, nil
}

// Match reports the ban in the snapshot that matches key or addr at now,
// as access.List.Match does. It never calls Redis and does not allocate.
func (b *Bans) Match(addr netip.Addr, key string, now time.Time) (access.Entry, bool) {
	return b.view.Load().match(addr, key, now)
}

// banItem is one ban to make: its target, how long, and its id.
type banItem struct {
	e    access.Entry // normalized; Expires is ignored
	id   string
	mode string // "ever", "for" or "until", as ban.lua takes them
	arg  int64
}

// item checks e and returns it as a ban until e.Expires, or for good.
func item(e access.Entry) (banItem, error) {
	e, err := normalize(e)
	if err != nil {
		return banItem{}, err
	}
	it := banItem{e: e, id: idOf(e), mode: "ever"}
	if e.Expires.IsZero() {
		return it, nil
	}
	ms := e.Expires.UnixMilli()
	if e.Expires.After(time.UnixMilli(ms)) {
		ms++
	}
	if ms <= 0 {
		return banItem{}, fmt.Errorf("%w: %v has expired already", access.ErrInvalidEntry, e)
	}
	it.mode, it.arg = "until", ms
	return it, nil
}

// Ban bans e.Prefix or e.Key (exactly one set; a single address is a /32
// or /128) on every server, with e.Reason: for d from Redis's now when
// d > 0 (at least a millisecond, rounded up to one; e.Expires is then
// ignored), else until e.Expires, kept to the millisecond and rounded up,
// or for good when Expires is zero too. A ban of a target already banned
// replaces it. It returns the ban as stored, and puts it in force on this
// server before it returns (on the others within a poll interval). An
// invalid entry, a negative d, or an Expires not after Redis's now is an
// error wrapping access.ErrInvalidEntry; a ban that would make the index
// hold more than WithMax bans wraps access.ErrTooLarge; other errors are
// Redis's.
//
// A Ban costs one script call and a change of the snapshot in time
// proportional to the change, not to the bans held: about 0.15 ms with
// 100,000 held, and as much of every other server's CPU (BenchmarkBan,
// BenchmarkPropagation).
func (b *Bans) Ban(ctx context.Context, e access.Entry, d time.Duration) (access.Entry, error) {
	if d < 0 {
		return access.Entry{}, fmt.Errorf("%w: ban duration %v is negative", access.ErrInvalidEntry, d)
	}
	if d > 0 {
		e.Expires = time.Time{}
	}
	it, err := item(e)
	if err != nil {
		return access.Entry{}, err
	}
	if d > 0 {
		it.mode, it.arg = "for", int64((d+time.Millisecond-1)/time.Millisecond)
	}
	out, err := b.ban(ctx, []banItem{it}, false)
	if err != nil {
		return access.Entry{}, err
	}
	return out[0], nil
}

// BanMany bans every entry, as Ban does each with d = 0 (until its
// Expires, or for good), in one script call: all of
// them or, on an error, none. It returns the bans as stored, in the order
// given; of two entries for one target the later stands. It takes at most
// 1,000 entries; more are an error wrapping access.ErrTooLarge, as is
// a batch that would make the index hold more than WithMax bans. An
// invalid entry, or one whose Expires is not after Redis's now, is an
// error wrapping access.ErrInvalidEntry that names its index. No entries
// is no call.
//
// It is for bursts (an abuse detector that bans a few hundred addresses at
// once): 1,000 bans in one call take about 20 ms with 100,000 held, a
// sixth of 1,000 Ban calls, holding Redis about 10 ms, and cost each
// other server about 10 ms of CPU, in one poll (BenchmarkBanMany,
// BenchmarkPropagationMany).
func (b *Bans) BanMany(ctx context.Context, entries []access.Entry) ([]access.Entry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	if len(entries) > maxBatch {
		return nil, fmt.Errorf("%w: rediswatch: BanMany: %d entries, more than %d in one call", access.ErrTooLarge, len(entries), maxBatch)
	}
	items := make([]banItem, len(entries))
	for i, e := range entries {
		it, err := item(e)
		if err != nil {
			return nil, fmt.Errorf("rediswatch: BanMany: entries[%d]: %w", i, err)
		}
		items[i] = it
	}
	return b.ban(ctx, items, true)
}

// ban runs ban.lua on items and applies the bans here.
func (b *Bans) ban(ctx context.Context, items []banItem, batch bool) ([]access.Entry, error) {
	keys := make([]string, 0, 5+len(items))
	keys = append(keys, b.index, b.ver, b.log, b.marker, b.rjournal)
	args := make([]any, 0, 2+4*len(items))
	args = append(args, b.cfg.max, logLen)
	for _, it := range items {
		keys = append(keys, b.banKey+it.id)
		args = append(args, it.id, it.mode, it.arg, it.e.Reason)
	}
	what := func() string {
		if batch {
			return fmt.Sprintf("%d bans", len(items))
		}
		return items[0].e.String()
	}
	var res []string
	for attempt := 0; ; attempt++ {
		var err error
		res, err = banScript.Run(ctx, b.client, keys, args...).StringSlice()
		if err == nil {
			break
		}
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "LOST ") && attempt == 0:
			if err := b.recoverLost(ctx); err != nil {
				return nil, fmt.Errorf("rediswatch: ban %s: Redis lost its data, and writing the bans back failed: %w", what(), err)
			}
			continue
		case strings.HasPrefix(msg, "EXPIRED "):
			if batch {
				n, _ := strconv.Atoi(strings.Fields(msg)[1])
				if n >= 1 && n <= len(items) {
					return nil, fmt.Errorf("%w: rediswatch: BanMany: entries[%d] %v: %s", access.ErrInvalidEntry, n-1, items[n-1].e, msg)
				}
			}
			return nil, fmt.Errorf("%w: %s: %s", access.ErrInvalidEntry, what(), msg)
		case strings.HasPrefix(msg, "TOOMANY "):
			return nil, fmt.Errorf("%w: %s: %s", access.ErrTooLarge, what(), msg)
		}
		return nil, fmt.Errorf("rediswatch: ban %s: %w", what(), err)
	}
	if len(res) != 3+2*len(items) {
		return nil, fmt.Errorf("rediswatch: ban %s: a reply of %d values", what(), len(res))
	}
	out := make([]access.Entry, len(items))
	changes := make([]ownChange, len(items))
	for i, it := range items {
		ms, err1 := strconv.ParseInt(res[3+2*i], 10, 64)
		seq, err2 := strconv.ParseInt(res[4+2*i], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("rediswatch: ban %s: unexpected reply %q", what(), res)
		}
		e := it.e
		e.Expires = time.Time{}
		if ms != 0 {
			e.Expires = time.UnixMilli(ms)
		}
		out[i] = e
		changes[i] = ownChange{id: it.id, seq: seq, entry: e, ms: ms}
	}
	b.applyOwn(res[1], res[2], res[len(res)-1], changes)
	return out, nil
}

// Unban lifts the ban on target.Prefix or target.Key (exactly one set;
// Expires and Reason are ignored) on every server, and reports whether
// one was in force. It is lifted on this server before Unban returns, on
// the others within a poll interval. An invalid target is an error
// wrapping access.ErrInvalidEntry; other errors are Redis's. It costs as
// much as a Ban.
func (b *Bans) Unban(ctx context.Context, target access.Entry) (bool, error) {
	t, err := normalize(access.Entry{Prefix: target.Prefix, Key: target.Key})
	if err != nil {
		return false, err
	}
	id := idOf(t)
	keys := []string{b.index, b.ver, b.log, b.marker, b.rjournal, b.banKey + id}
	var res []string
	for attempt := 0; ; attempt++ {
		res, err = unbanScript.Run(ctx, b.client, keys, id, logLen).StringSlice()
		if err == nil {
			break
		}
		if strings.HasPrefix(err.Error(), "LOST ") && attempt == 0 {
			if err := b.recoverLost(ctx); err != nil {
				return false, fmt.Errorf("rediswatch: unban %v: Redis lost its data, and writing the bans back failed: %w", t, err)
			}
			continue
		}
		return false, fmt.Errorf("rediswatch: unban %v: %w", t, err)
	}
	if len(res) != 2 && len(res) != 4 {
		return false, fmt.Errorf("rediswatch: unban %v: a reply of %d values", t, len(res))
	}
	if len(res) == 2 {
		b.dropStale(id, t, res[1])
	} else {
		seq, err := strconv.ParseInt(res[2], 10, 64)
		if err != nil {
			return false, fmt.Errorf("rediswatch: unban %v: unexpected reply %q", t, res)
		}
		b.applyOwn(res[1], res[3], res[2], []ownChange{{id: id, seq: seq, entry: t, lift: true}})
	}
	return res[0] == "1", nil
}

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

// List returns the bans in force in Redis now, at most WithMax of
// them, ranges first (IPv4, then IPv6, in address order), then keys in
// byte order, with Expires by Redis's clock. Malformed bans are skipped
// and logged, as in a load. If Redis lost its data, List writes the bans
// back first (see the package doc).
func (b *Bans) List(ctx context.Context) ([]access.Entry, error) {
	s, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	lost := b.needsRecoveryLocked(s.epoch)
	b.mu.Unlock()
	if lost {
		if err := b.reload(ctx); err != nil {
			return nil, err
		}
		if s, err = b.load(ctx); err != nil {
			return nil, err
		}
	}
	entries := make([]access.Entry, len(s.bans))
	for i, lb := range s.bans {
		entries[i] = lb.entry
	}
	slices.SortFunc(entries, func(a, b access.Entry) int { return accessentry.Compare(a.Prefix, a.Key, b.Prefix, b.Key) })
	return entries, nil
}

// Sync brings the snapshot up to date with Redis now, as the poller does
// every poll interval: it applies the changes made since the last, or
// reloads every ban when it must (see the package doc), and returns
// Redis's error if it cannot; the last snapshot then stays in force. New
// loads every ban before returning; a readiness probe may call Sync,
// which costs one script call when nothing changed.
func (b *Bans) Sync(ctx context.Context) error {
	full, err := b.catchUp(ctx)
	if err == nil && full {
		err = b.reload(ctx)
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.pruneLocked(b.cfg.now())
	b.mu.Unlock()
	return nil
}

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

// parseSeq returns a version as a number, 0 if it is none.
func parseSeq(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// errMalformed is wrapped by the reason a ban in Redis was skipped.
var errMalformed = errors.New("malformed ban")

// idOf returns the id of e's target.
func idOf(e access.Entry) string {
	if e.Key != "" {
		return "k:" + e.Key
	}
	return "p:" + e.Prefix.String()
}

// parseTarget reads the target of an id; anything but what idOf writes is
// an error.
func parseTarget(id string) (access.Entry, error) {
	e, err := splitID(id)
	if err != nil {
		return e, err
	}
	return canonical(e)
}

// splitID reads an id's kind and target, unchecked.
func splitID(id string) (access.Entry, error) {
	var e access.Entry
	kind, target, ok := strings.Cut(id, ":")
	switch {
	case !ok:
		return e, fmt.Errorf("%w: id without a kind", errMalformed)
	case kind == "k":
		e.Key = target
	case kind == "p":
		p, err := netip.ParsePrefix(target)
		if err != nil {
			return e, fmt.Errorf("%w: %v", errMalformed, err)
		}
		e.Prefix = p
	default:
		return e, fmt.Errorf("%w: id of kind %s", errMalformed, clip(kind))
	}
	return e, nil
}

// normalize checks e as access.NewList does, and returns it in the form
// a List stores it (the range masked, an IPv4-mapped one folded to IPv4).
// An invalid e is an error wrapping access.ErrInvalidEntry.
func normalize(e access.Entry) (access.Entry, error) {
	p, err := accessentry.Check(e.Prefix, e.Key, e.Reason)
	if err != nil {
		return access.Entry{}, fmt.Errorf("%w: %w", access.ErrInvalidEntry, err)
	}
	e.Prefix = p
	return e, nil
}

// liveAt reports whether e matches at now: it is permanent or expires
// after now.
func liveAt(e access.Entry, now time.Time) bool {
	return e.Expires.IsZero() || now.Before(e.Expires)
}

// canonical checks e as normalize does, and that its range is in the form
// Normalize gives it.
func canonical(e access.Entry) (access.Entry, error) {
	n, err := normalize(e)
	if err != nil {
		return e, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if n.Prefix != e.Prefix {
		return e, fmt.Errorf("%w: range %v is not in its canonical form %v", errMalformed, e.Prefix, n.Prefix)
	}
	return n, nil
}

// parse reads one ban from its id and its value; anything but what Ban
// writes is an error.
func parse(id, value string) (access.Entry, error) {
	e, err := splitID(id)
	if err != nil {
		return e, err
	}
	version, rest, ok := strings.Cut(value, "|")
	if !ok || version != "v1" {
		return e, fmt.Errorf("%w: value %s is not v1|<expires_ms>|<reason>", errMalformed, clip(value))
	}
	expires, reason, ok := strings.Cut(rest, "|")
	ms, err := strconv.ParseInt(expires, 10, 64)
	if !ok || err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return e, fmt.Errorf("%w: value %s is not v1|<expires_ms>|<reason>", errMalformed, clip(value))
	}
	if ms != 0 {
		e.Expires = time.UnixMilli(ms)
	}
	e.Reason = reason
	return canonical(e)
}

// poll catches up with the log, or reloads when it must; then drops the
// bans that have expired here. The loop calls it every poll interval.
func (b *Bans) poll(base context.Context) {
	ctx, cancel := context.WithTimeout(base, pollTimeout)
	full, err := b.catchUp(ctx)
	cancel()
	if err == nil && full {
		ctx, cancel := context.WithTimeout(base, loadTimeout)
		err = b.reload(ctx)
		cancel()
	}
	b.loop.report(err, b.cfg.log(), "bans", b.view.Load().len())
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pruneLocked(b.cfg.now())
}

// pruneLocked drops from the view the bans expired at now (they no longer
// match already).
func (b *Bans) pruneLocked(now time.Time) {
	if v := b.expq.prune(b.view.Load(), now); v != nil {
		b.view.Store(v)
	}
}

// Close stops the poller and waits for it to end (an in-flight poll ends
// at once, or within the client's read timeout); the last snapshot stays
// in force for Match, and Ban, Unban, List and Sync still work. Close may
// be called more than once, and returns nil.
func (b *Bans) Close() error {
	b.loop.stop()
	return nil
}
