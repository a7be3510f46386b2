// Package redisbans shares bans between every app server through Redis:
// a ban added on one server is in force on all of them within about a
// poll interval (200 ms by default, well under a second), survives the
// restart of any server, and ends when its Redis TTL runs out.
//
// A [Bans] is an access.Matcher for the deny side of the HTTP flow. Match
// never calls Redis: it reads a local snapshot, an immutable access.List,
// with one atomic load and no allocation. A goroutine polls a version key
// (one GET per poll) and reloads every ban when it changes, and at least
// every resync interval. Ban, BanFor, Unban and List call Redis.
//
// # Keys
//
// Every key has the hash tag of the prefix (WithPrefix), so all of them
// sit in one Redis Cluster slot and every script touches one slot:
//
//	{ratelimit:bans}:b:<id>  one ban: "v1|<expires_ms>|<reason>", with a
//	                         PXAT TTL at its end (none if permanent)
//	{ratelimit:bans}:i       the index: a sorted set of ids by expires_ms
//	{ratelimit:bans}:v       the version, bumped by every Ban and Unban
//
// An id is "p:" and a range ("p:203.0.113.0/24", "p:2001:db8::1/128") or
// "k:" and a client key ("k:user:42"). Ban and Unban are Lua scripts that
// change the ban, the index and the version at once; a load reads the
// index and then the bans (MGET), and a change between the two bumps the
// version again, so the next poll loads once more.
//
// Redis keeps the time: BanFor's TTL runs from Redis's TIME, and Expires
// in what List and Ban return are by Redis's clock. The snapshot shifts
// them by this server's clock skew from Redis (when over 100 ms), so that
// Match, given time.Now(), ends a ban at the instant Redis does.
//
// The scripts need Redis 6.2 or later (SET with PXAT, ZRANGE with BYSCORE
// and REV); on a Redis Cluster every client of one prefix talks to the
// node that holds its slot.
//
// # Failures
//
// When Redis cannot be reached, Match keeps the last snapshot, expiring
// its bans locally at their instant; the outage and its end are logged
// once each (WithLogger), and the first poll that succeeds reloads. A ban
// found malformed in Redis (written by hand, or by another version) is
// skipped, and logged with the number skipped; it never stops the others
// from loading. A load reads at most WithMaxBans bans, the permanent ones
// first and then those that expire last.
//
// Bans with a TTL are volatile keys: a Redis with a maxmemory and a
// volatile-* or allkeys-* policy may evict them under memory pressure, as
// it may evict limiter state. Give bans a Redis (or a maxmemory) of their
// own if losing one under pressure is not acceptable.
package redisbans

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
)

var (
	//go:embed ban.lua
	banLua string
	//go:embed unban.lua
	unbanLua string
	//go:embed load.lua
	loadLua string

	banScript   = redis.NewScript(banLua)
	unbanScript = redis.NewScript(unbanLua)
	loadScript  = redis.NewScript(loadLua)
)

// Bounds of the calls the poller makes.
const (
	// pollTimeout bounds the GET of the version.
	pollTimeout = time.Second
	// loadTimeout bounds a full load from the poller.
	loadTimeout = 10 * time.Second
	// mgetChunk is how many bans one MGET of a load reads.
	mgetChunk = 1000
	// minSkew is the least clock skew from Redis that the snapshot
	// corrects for; below it the measure is mostly round-trip noise.
	minSkew = 100 * time.Millisecond
)

// Bans is a set of bans shared through Redis; see the package doc. It is
// safe for concurrent use. Close stops its poller.
type Bans struct {
	client redis.UniversalClient
	cfg    config
	index  string // the index key
	ver    string // the version key
	banKey string // the ban keys' start, before the id

	list atomic.Pointer[access.List]

	mu         sync.Mutex // serializes loads; guards the fields below
	loaded     string     // the version of the snapshot
	lastFull   time.Time  // when the snapshot was loaded
	entries    []access.Entry
	nextExpiry time.Time // the first Expires in entries, zero if none
	down       bool      // the last poll failed

	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ access.Matcher = (*Bans)(nil)

// New returns a Bans over the Redis behind client (a *redis.Client, a
// *redis.ClusterClient or any other redis.UniversalClient), which it does
// not own: closing it is the caller's business. New loads every ban
// before it returns, bounded by WithStartTimeout, so a server that starts
// (or restarts) enforces the bans already made; then it starts the
// poller. A nil client, or an option nil or refusing its value, is an
// error wrapping core.ErrInvalidOption; a first load that fails (Redis
// unreachable) is an error too, and nothing is started: call New again.
func New(client redis.UniversalClient, opts ...Option) (*Bans, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisbans.New: nil client", core.ErrInvalidOption)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: redisbans.New: nil %T", core.ErrInvalidOption, client)
	}
	cfg := defaults()
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: redisbans.New: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	tag := "{" + cfg.prefix + "}:"
	b := &Bans{
		client: client,
		cfg:    cfg,
		index:  tag + "i",
		ver:    tag + "v",
		banKey: tag + "b:",
		done:   make(chan struct{}),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(b.ctx, cfg.startTimeout)
	defer cancel()
	if err := b.Sync(ctx); err != nil {
		b.cancel()
		return nil, fmt.Errorf("redisbans.New: loading the bans: %w", err)
	}
	go b.run()
	return b, nil
}

// Match reports the ban in the snapshot that matches key or addr at now,
// as access.List.Match does. It never calls Redis and does not allocate.
func (b *Bans) Match(addr netip.Addr, key string, now time.Time) (access.Entry, bool) {
	return b.list.Load().Match(addr, key, now)
}

// Ban bans e.Prefix or e.Key (exactly one set; a single address is a /32
// or /128) until e.Expires, or for good when Expires is zero, with
// e.Reason, on every server. A ban of a target already banned replaces
// it. Expires is kept to the millisecond, rounded up. It returns the ban
// as stored, and puts it in force on this server before it returns (on
// the others within a poll interval). An invalid entry, or an Expires not
// after Redis's now, is an error wrapping access.ErrInvalidEntry; a ban
// that would make the index hold more than WithMaxBans bans wraps
// access.ErrTooManyBans; other errors are Redis's.
func (b *Bans) Ban(ctx context.Context, e access.Entry) (access.Entry, error) {
	e, err := e.Normalize()
	if err != nil {
		return access.Entry{}, err
	}
	if e.Expires.IsZero() {
		return b.ban(ctx, e, "ever", 0)
	}
	ms := e.Expires.UnixMilli()
	if e.Expires.After(time.UnixMilli(ms)) {
		ms++
	}
	if ms <= 0 {
		return access.Entry{}, fmt.Errorf("%w: %v has expired already", access.ErrInvalidEntry, e)
	}
	return b.ban(ctx, e, "until", ms)
}

// BanFor bans e.Prefix or e.Key for d (at least a millisecond, rounded up
// to one) from Redis's now, ignoring e.Expires; see Ban.
func (b *Bans) BanFor(ctx context.Context, e access.Entry, d time.Duration) (access.Entry, error) {
	if d <= 0 {
		return access.Entry{}, fmt.Errorf("%w: ban duration %v is not positive", access.ErrInvalidEntry, d)
	}
	e.Expires = time.Time{}
	e, err := e.Normalize()
	if err != nil {
		return access.Entry{}, err
	}
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return b.ban(ctx, e, "for", ms)
}

func (b *Bans) ban(ctx context.Context, e access.Entry, mode string, arg int64) (access.Entry, error) {
	id := idOf(e)
	res, err := banScript.Run(ctx, b.client, []string{b.banKey + id, b.index, b.ver},
		id, mode, arg, e.Reason, b.cfg.maxBans).StringSlice()
	if err != nil {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "EXPIRED "):
			return access.Entry{}, fmt.Errorf("%w: %v: %s", access.ErrInvalidEntry, e, msg)
		case strings.HasPrefix(msg, "TOOMANY "):
			return access.Entry{}, fmt.Errorf("%w: %v: %s", access.ErrTooManyBans, e, msg)
		}
		return access.Entry{}, fmt.Errorf("redisbans: ban %v: %w", e, err)
	}
	if len(res) != 2 {
		return access.Entry{}, fmt.Errorf("redisbans: ban %v: unexpected reply %q", e, res)
	}
	ms, err := strconv.ParseInt(res[0], 10, 64)
	if err != nil {
		return access.Entry{}, fmt.Errorf("redisbans: ban %v: unexpected reply %q", e, res)
	}
	e.Expires = time.Time{}
	if ms != 0 {
		e.Expires = time.UnixMilli(ms)
	}
	b.syncAfterChange(ctx, "ban")
	return e, nil
}

// Unban lifts the ban on target.Prefix or target.Key (exactly one set;
// Expires and Reason are ignored) on every server, and reports whether
// one was in force. It is lifted on this server before Unban returns, on
// the others within a poll interval. An invalid target is an error
// wrapping access.ErrInvalidEntry; other errors are Redis's.
func (b *Bans) Unban(ctx context.Context, target access.Entry) (bool, error) {
	t, err := access.Entry{Prefix: target.Prefix, Key: target.Key}.Normalize()
	if err != nil {
		return false, err
	}
	id := idOf(t)
	n, err := unbanScript.Run(ctx, b.client, []string{b.banKey + id, b.index, b.ver}, id).Int64()
	if err != nil {
		return false, fmt.Errorf("redisbans: unban %v: %w", t, err)
	}
	b.syncAfterChange(ctx, "unban")
	return n > 0, nil
}

// syncAfterChange reloads after this server's own change, so that it is in
// force here when Ban or Unban returns. The change is made whatever
// happens here: a failed reload is logged, and the poller catches up.
func (b *Bans) syncAfterChange(ctx context.Context, what string) {
	if err := b.Sync(ctx); err != nil {
		b.cfg.log().Warn("redisbans: reloading after a change failed; the poller will catch up",
			slog.String("change", what), slog.Any("error", err))
	}
}

// List returns the bans in force in Redis now, at most WithMaxBans of
// them, ranges first (IPv4, then IPv6, in address order), then keys in
// byte order, with Expires by Redis's clock. Malformed bans are skipped
// and logged, as in a load.
func (b *Bans) List(ctx context.Context) ([]access.Entry, error) {
	s, err := b.load(ctx)
	if err != nil {
		return nil, err
	}
	access.SortEntries(s.entries)
	return s.entries, nil
}

// Sync reloads every ban from Redis now, as the poller does when the
// version changes, and returns Redis's error if it cannot; the last
// snapshot then stays in force. New calls it before returning; a
// readiness probe may call it too.
func (b *Bans) Sync(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.syncLocked(ctx)
}

func (b *Bans) syncLocked(ctx context.Context) error {
	s, err := b.load(ctx)
	if err != nil {
		return err
	}
	skew := s.skew
	if skew > -minSkew && skew < minSkew {
		skew = 0
	}
	var next time.Time
	for i := range s.entries {
		e := &s.entries[i]
		if e.Expires.IsZero() {
			continue
		}
		e.Expires = e.Expires.Add(-skew)
		if next.IsZero() || e.Expires.Before(next) {
			next = e.Expires
		}
	}
	l, err := access.NewList(s.entries...)
	if err != nil {
		// Every entry was checked by parse: a bug, not bad data.
		return fmt.Errorf("redisbans: building the snapshot: %w", err)
	}
	b.list.Store(l)
	b.loaded = s.version
	b.lastFull = time.Now()
	b.entries = s.entries
	b.nextExpiry = next
	return nil
}

// snapshot is what one load read.
type snapshot struct {
	version string
	entries []access.Entry // Expires by Redis's clock
	skew    time.Duration  // Redis's clock minus ours, as measured
}

// load reads every ban from Redis: the index (load.lua), then the bans.
func (b *Bans) load(ctx context.Context) (snapshot, error) {
	start := b.cfg.now()
	reply, err := loadScript.Run(ctx, b.client, []string{b.index, b.ver}, b.cfg.maxBans).Slice()
	elapsed := b.cfg.now().Sub(start)
	if err != nil {
		return snapshot{}, fmt.Errorf("redisbans: loading the index: %w", err)
	}
	if len(reply) < 3 || len(reply)%2 != 1 {
		return snapshot{}, fmt.Errorf("redisbans: loading the index: a reply of %d values", len(reply))
	}
	version, _ := reply[0].(string)
	nowStr, _ := reply[1].(string)
	nowMS, err := strconv.ParseInt(nowStr, 10, 64)
	if err != nil {
		return snapshot{}, fmt.Errorf("redisbans: loading the index: Redis's time %q", nowStr)
	}
	live, _ := reply[2].(int64)
	s := snapshot{version: version, skew: time.UnixMilli(nowMS).Sub(start.Add(elapsed / 2))}

	ids := make([]string, 0, (len(reply)-3)/2)
	for i := 3; i+1 < len(reply); i += 2 {
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
			return snapshot{}, fmt.Errorf("redisbans: loading the bans: %w", err)
		}
	}
	for _, c := range cmds {
		values = append(values, c.Val()...)
	}
	if len(values) != len(ids) {
		return snapshot{}, fmt.Errorf("redisbans: loading the bans: %d values for %d ids", len(values), len(ids))
	}

	var (
		skipped   int
		firstBad  string
		firstWhy  error
		entries   = make([]access.Entry, 0, len(ids))
		nowRedis  = time.UnixMilli(nowMS)
		truncated = live > int64(len(ids))
	)
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
		if e.LiveAt(nowRedis) {
			entries = append(entries, e)
		}
	}
	if skipped > 0 {
		b.cfg.log().Error("redisbans: skipped malformed bans in Redis",
			slog.Int("skipped", skipped), slog.String("first", clip(firstBad)), slog.Any("error", firstWhy))
	}
	if truncated {
		b.cfg.log().Warn("redisbans: more bans in Redis than WithMaxBans; loaded the permanent ones, then those that expire last",
			slog.Int64("in_redis", live), slog.Int("loaded", len(ids)))
	}
	s.entries = entries
	return s, nil
}

// errMalformed is wrapped by the reason a ban in Redis was skipped.
var errMalformed = errors.New("malformed ban")

// idOf returns the id of e's target.
func idOf(e access.Entry) string {
	if e.IsKey() {
		return "k:" + e.Key
	}
	return "p:" + e.Prefix.String()
}

// parse reads one ban from its id and its value; anything but what Ban
// writes is an error.
func parse(id, value string) (access.Entry, error) {
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
	n, err := e.Normalize()
	if err != nil {
		return e, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if n.Prefix != e.Prefix {
		return e, fmt.Errorf("%w: range %v is not in its canonical form %v", errMalformed, e.Prefix, n.Prefix)
	}
	return n, nil
}

// clip quotes s for a log line, cut to 64 bytes.
func clip(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// run polls until Close.
func (b *Bans) run() {
	defer close(b.done)
	t := time.NewTicker(b.cfg.poll)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			b.poll()
		}
	}
}

// poll reads the version and reloads when it changed, after an outage or
// when the snapshot is older than the resync interval; then drops the
// bans that have expired here.
func (b *Bans) poll() {
	ctx, cancel := context.WithTimeout(b.ctx, pollTimeout)
	v, err := b.client.Get(ctx, b.ver).Result()
	cancel()
	if errors.Is(err, redis.Nil) {
		v, err = "", nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && (v != b.loaded || b.down || time.Since(b.lastFull) >= b.cfg.resync) {
		ctx, cancel := context.WithTimeout(b.ctx, loadTimeout)
		err = b.syncLocked(ctx)
		cancel()
	}
	switch {
	case err != nil && b.ctx.Err() != nil:
		return // closing
	case err != nil:
		if !b.down {
			b.down = true
			b.cfg.log().Error("redisbans: cannot read the bans from Redis; keeping the last ones, expiring them here",
				slog.Int("bans", len(b.entries)), slog.Any("error", err))
		}
	case b.down:
		b.down = false
		b.cfg.log().Info("redisbans: reading the bans from Redis again", slog.Int("bans", len(b.entries)))
	}
	b.pruneLocked(b.cfg.now())
}

// pruneLocked drops from the snapshot the bans expired at now (they no
// longer match already), once the first of them has.
func (b *Bans) pruneLocked(now time.Time) {
	if b.nextExpiry.IsZero() || now.Before(b.nextExpiry) {
		return
	}
	kept := make([]access.Entry, 0, len(b.entries))
	var next time.Time
	for _, e := range b.entries {
		if !e.LiveAt(now) {
			continue
		}
		kept = append(kept, e)
		if !e.Expires.IsZero() && (next.IsZero() || e.Expires.Before(next)) {
			next = e.Expires
		}
	}
	l, err := access.NewList(kept...)
	if err != nil {
		return // cannot happen: the entries were a List already
	}
	b.list.Store(l)
	b.entries = kept
	b.nextExpiry = next
}

// Len returns how many bans the snapshot holds, expired ones not yet
// dropped included.
func (b *Bans) Len() int { return b.list.Load().Len() }

// Close stops the poller and waits for it to end (an in-flight poll ends
// at once, or within the client's read timeout); the last snapshot stays
// in force for Match, and Ban, Unban, List and Sync still work. Close may
// be called more than once.
func (b *Bans) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		<-b.done
	})
	return nil
}
