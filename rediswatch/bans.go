package rediswatch

import (
	"context"
	_ "embed"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/rules/accessentry"
)

var (
	//go:embed ban.lua
	banLua string
	//go:embed unban.lua
	unbanLua string
	//go:embed load.lua
	loadLua string
	//go:embed page.lua
	pageLua string
	//go:embed poll.lua
	pollLua string
	//go:embed restore_claim.lua
	claimLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed restore_done.lua
	doneLua string

	banScript     = redis.NewScript(banLua)
	unbanScript   = redis.NewScript(unbanLua)
	loadScript    = redis.NewScript(loadLua)
	pageScript    = redis.NewScript(pageLua)
	pollScript    = redis.NewScript(pollLua)
	claimScript   = redis.NewScript(claimLua)
	restoreScript = redis.NewScript(restoreLua)
	doneScript    = redis.NewScript(doneLua)
)

// Bounds of the calls the poller makes, and of the log.
const (
	// loadTimeout bounds a full load from the poller, waiting for
	// another server's write-back included; each of its calls is small,
	// and bounded by the client's timeouts too.
	loadTimeout = time.Minute
	// loadPage is how many ids one page of a load asks ZSCAN for (it
	// may return a few more or fewer), whose bans the page then reads:
	// a script that holds Redis about a millisecond, with a reply of
	// about 100 KB.
	loadPage = 2000
	// pageTries is how many times a load sends a page that timed out.
	pageTries = 3
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
	index, ver, log, marker, rjournal, lease, banKey string

	view atomic.Pointer[view]

	// reloadMu serializes full loads, and recoverMu writing back; each
	// is taken before mu, never while holding it, and reloadMu before
	// recoverMu.
	reloadMu, recoverMu sync.Mutex

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
		lease:    tag + "w",
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

// List returns the bans in force in Redis now, at most WithMax of
// them, ranges first (IPv4, then IPv6, in address order), then keys in
// byte order, with Expires by Redis's clock. Malformed bans are skipped
// and logged, as in a load. If Redis lost its data, List writes the bans
// back first (see the package doc).
func (b *Bans) List(ctx context.Context) ([]access.Entry, error) {
	s, err := b.load(ctx, false)
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
		if s, err = b.load(ctx, false); err != nil {
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
// in force for Match, and Ban, BanMany, Unban and List still work. Close
// may be called more than once, and returns nil.
func (b *Bans) Close() error {
	b.loop.stop()
	return nil
}
