// Package reputation scores clients by what they do and answers those
// that misbehave: a score per client key rises with bad signals (denied by
// a limit, locked out, deny-listed, 401 and 403 answers, 404s for paths no
// route serves, what the application reports) and halves every half-life,
// so that a client who stops, or a shared or recycled address, recovers.
// Bands of score act on the client: its limits scaled down, or a ban
// through the bans every app server holds, escalating on repeat.
//
// A Tracker is given to the HTTP flow with httplimit.WithReputation, which
// feeds it the flow's and the responses' signals and enforces its bans
// and scales:
//
//	rep, err := reputation.New(reputation.Config{
//		Bands: []reputation.Band{
//			{Name: "suspicious", Above: 10, Scale: 0.5}, // half the limits
//			{Name: "abusive", Above: 30, Ban: true},      // banned: 1 min, 2, 4... up to a day
//		},
//	})
//	flow, err := httplimit.New(store, layers, httplimit.WithReputation(rep))
//
// The signal that crosses a ban band bans the client at once: that request
// is the last to pass on that server, and with rediswatch's Bans as
// Config.Bans, every server holds the ban within its poll interval (200 ms
// by default). Bans escalate: Config.BanFor at the first offence, doubled
// for each offence remembered, up to Config.BanMax, ±10% at random so
// that banned clients do not return at one instant. Offences are
// remembered apart from the score, and forgiven on a half-life of their
// own (Config.OffenceHalfLife).
//
// Who the client is: the flow's client address (httplimit.WithClientIP:
// IPv6 grouped by /56, so that rotating addresses inside a prefix
// launders nothing, and no forwarding header believed but from trusted
// proxies, so that no client can lower another's reputation by forging
// one). Every signal the flow sees counts against it, whatever
// Config.Key: a request proves no identity to the flow, and one that
// claims another client's (a key id, a login form's username) must not
// get that client banned. Config.Key is whom Penalize counts against.
//
// A 404 for a path no route serves (a scanner walking /wp-admin, /.env)
// is told from a 404 on a route that exists (a WebDAV or file-sync client
// asking for a file it does not have, a missing static file): only the
// first weighs by default. A catch-all route serving as the 404 page,
// which no router can tell from a route, says so with MarkUnrouted.
//
// Scores are kept in process, or shared by every app server
// (Config.Scores: rediswatch.NewScores keeps them in Redis). Decisions
// read the copy of the scores this server holds (no round trip). A signal
// is one atomic add, which returns the score every server's signals made:
// the signal that crosses a band, on any server, acts. But a client's
// signals that come while its add is under way, or while Redis is
// failing, count in the copy at once and go to Redis within 100 ms,
// batched: a flood of bad requests costs Redis at most one script under
// way per client and server, and a slow Redis delays one bad request by
// at most 250 ms a second (a go-redis client with ContextTimeoutEnabled),
// not each. Memory is bounded under a flood of distinct keys.
//
// In shadow mode (Config.Shadow) a Tracker scores, and logs what it would
// do, but neither bans nor scales.
package reputation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/scores"
	"github.com/apigate/ratelimit/keyfuncs"
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
	// Reported: bad behaviour the application reports with Penalize (a failed
	// captcha, a honeypot route), of the weight it gives.
	Reported
)

// defaultWeights are the signals' weights when Config.Weights does not
// say.
var defaultWeights = [...]float64{Denied: 1, LockedOut: 3, DenyListed: 1, Refused: 1, Unrouted: 1, NotFound: 0, Reported: 0}

// Band is a range of scores and what is done to the clients in it: from
// Above (excluded) to the next band's Above.
type Band struct {
	// Name names the band in logs and metrics.
	Name string
	// Above is the score the band starts above, at least 0.
	Above float64
	// Scale, in (0, 1], scales the client's limits while it is in the
	// band: 0.5 halves them, rounded down (a limit of 1 stays 1), and a
	// burst the halved rate cannot refill within 366 days is cut to what
	// it refills, as an override's is. 0 leaves them.
	Scale float64
	// Ban bans the client when a signal takes it into the band, for the
	// length its offences earn (see the package doc).
	Ban bool
}

// Banner holds bans and enforces them: rediswatch's Bans, shared by
// every app server. A Ban must be in force for Match on this server when
// it returns.
type Banner interface {
	access.Matcher
	Ban(ctx context.Context, e access.Entry, d time.Duration) (access.Entry, error)
}

// Config configures a Tracker. Its zero value but for Bands is a valid
// configuration in process.
type Config struct {
	// Key says whom Penalize counts against: an identity the handler that
	// reports has proven (a signed-in user). Nil, or a request it finds
	// no key for, is the flow's client address (httplimit.WithClientIP),
	// which the flow's own signals always count against. A request is
	// refused while its address or its Key is banned.
	Key keyfuncs.Func
	// HalfLife is how long a score takes to halve: 10 minutes when 0.
	HalfLife time.Duration
	// Weights replaces the default weight of the signals it names (see
	// each Signal), from 0 (not scored) to 2^20.
	Weights map[Signal]float64
	// Bands, by Above ascending, say what is done to the clients in
	// them; at least one.
	Bands []Band
	// Bans holds the bans of the bands that ban: rediswatch's Bans for
	// every app server. Nil keeps them in this process.
	Bans Banner
	// BanFor is a first offence's ban, 1 minute when 0; each offence
	// remembered doubles it, up to BanMax, 24 hours when 0.
	BanFor, BanMax time.Duration
	// OffenceHalfLife is how long an offence takes to be half forgiven:
	// a day when 0.
	OffenceHalfLife time.Duration
	// Scores, when set, shares the scores and offences with every app
	// server: rediswatch.NewScores keeps them in Redis. Nil keeps them in
	// this process.
	Scores SharedScores
	// Shadow scores, and logs what the Tracker would do, but never bans
	// nor scales: a reputation on trial.
	Shadow bool
	// Now is the clock scores decay by: time.Now when nil. Tests set it.
	Now func() time.Time
}

// store is what a Tracker keeps scores in (internal/rules/scores).
type store interface {
	Add(ctx context.Context, key string, w float64, now time.Time) (float64, error)
	Get(key string, now time.Time) float64
	Range(now time.Time, fn func(key string, v float64))
}

// signalNames are the signals' names, as metrics label them.
var signalNames = [...]string{Denied: "denied", LockedOut: "locked_out", DenyListed: "deny_listed", Refused: "refused",
	Unrouted: "unrouted", NotFound: "not_found", Reported: "reported"}

// Tracker scores clients and acts on their scores. Build it with New; it
// is safe for concurrent use.
type Tracker struct {
	cfg     Config // as given to New, for Config
	weights [Reported + 1]float64
	bands   []Band
	bans    Banner
	// fallback holds, on this server, the bans Config.Bans failed to (a
	// Redis down or frozen), for their length, so that a client who earned
	// one is refused here all the same; and bansPaused (ns) is until when
	// bans go there directly, without trying Config.Bans again.
	fallback   *access.Bans
	bansPaused atomic.Int64
	match      access.Matcher // the bans t enforces: bans, and fallback when there is one
	banFor     time.Duration
	banMax     time.Duration
	scores     store
	offences   store
	shadow     bool
	halfLife   time.Duration
	scales     bool // some band scales
	// scaleFrom is the lowest score a band scales from (its Above), and
	// suspects the clients whose score has been above it: Adjust reads
	// this snapshot, with one atomic load, and the score only of a client
	// in it. A client entering it copies it (under suspectsMu); one
	// already in it changes nothing, so that a client's every signal
	// costs no copy. Those whose score has decayed are dropped when it is
	// full, at most once per pruneEvery.
	scaleFrom  float64
	suspects   atomic.Pointer[map[string]struct{}]
	suspectsMu sync.Mutex
	pruned     time.Time // the last prune, under suspectsMu
	now        func() time.Time
	log        *slog.Logger
	lastLog    atomic.Int64                                                       // when flushFailed last logged, ns
	onOutcome  func(key string, s Signal, score float64, band string, acted bool) // tests
	// What the metrics read: the signals scored by kind, and the bans by
	// band, made and (in shadow mode) not made.
	signals    [Reported + 1]atomic.Uint64
	banned     []atomic.Uint64
	shadowBans []atomic.Uint64
}

// maxKeys bounds the scores and offences a Tracker holds in process.
const maxKeys = 100_000

// maxSuspects bounds the snapshot of the clients in a band that scales:
// past it, a client newly in such a band is not scaled until a prune
// makes room (it is still banned at a band that bans). Each client that
// enters copies it once, so a flood of distinct suspects costs at most
// maxSuspects copies of at most maxSuspects entries, then a prune per
// pruneEvery.
const maxSuspects = 4096

// pruneEvery is how often a full snapshot of suspects may be pruned.
const pruneEvery = time.Second

// New returns a Tracker configured by cfg. A configuration that cannot be
// carried out is an error wrapping core.ErrInvalidOption: no band, bands
// out of order, a Scale out of (0, 1], an unknown signal, a weight out
// of range, a negative duration.
func New(cfg Config) (*Tracker, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: reputation: %s", core.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if len(cfg.Bands) == 0 {
		return nil, bad("no band: a reputation that does nothing")
	}
	for i, b := range cfg.Bands {
		switch {
		case b.Name == "":
			return nil, bad("band %d has no name", i)
		case !(b.Above >= 0):
			return nil, bad("band %q: Above %v below 0", b.Name, b.Above)
		case i > 0 && !(b.Above > cfg.Bands[i-1].Above):
			return nil, bad("band %q: Above %v not above the band before it", b.Name, b.Above)
		case !(b.Scale >= 0 && b.Scale <= 1):
			return nil, bad("band %q: Scale %v out of (0, 1]", b.Name, b.Scale)
		}
	}
	for _, b := range cfg.Bands {
		if b.Ban && cfg.Scores != nil && cfg.Bans == nil {
			// Scores every server shares, and bans only this one holds: the
			// ban would not hold on the others.
			return nil, bad("band %q bans, and the scores are shared: Config.Bans must be bans every server holds (rediswatch.NewBans)", b.Name)
		}
	}
	for _, d := range []time.Duration{cfg.HalfLife, cfg.BanFor, cfg.BanMax, cfg.OffenceHalfLife} {
		if d < 0 {
			return nil, bad("a negative duration, %v", d)
		}
	}
	t := &Tracker{cfg: cfg, bands: slices.Clone(cfg.Bands), bans: cfg.Bans, banFor: cfg.BanFor, banMax: cfg.BanMax,
		shadow: cfg.Shadow, now: cfg.Now, log: slog.Default()}
	if t.now == nil {
		t.now = time.Now
	}
	t.cfg.Bands, t.cfg.Weights = slices.Clone(cfg.Bands), maps.Clone(cfg.Weights)
	t.banned, t.shadowBans = make([]atomic.Uint64, len(t.bands)), make([]atomic.Uint64, len(t.bands))
	copy(t.weights[:], defaultWeights[:])
	for s, w := range cfg.Weights {
		if s < Denied || s > Reported {
			return nil, bad("unknown signal %d", s)
		}
		if !(w >= 0 && w <= scores.MaxWeight) {
			return nil, bad("signal %d: weight %v out of [0, 2^20]", s, w)
		}
		t.weights[s] = w
	}
	for _, b := range t.bands {
		if b.Scale > 0 && b.Scale < 1 && !t.scales {
			t.scales, t.scaleFrom = true, b.Above
		}
	}
	t.halfLife = cmp.Or(cfg.HalfLife, 10*time.Minute)
	half := t.halfLife
	offHalf := cmp.Or(cfg.OffenceHalfLife, 24*time.Hour)
	t.banFor = cmp.Or(t.banFor, time.Minute)
	t.banMax = max(cmp.Or(t.banMax, 24*time.Hour), t.banFor)
	var err error
	if cfg.Scores != nil {
		var rs *shared
		if rs, err = newShared(cfg.Scores, "s:", half, maxKeys); err == nil {
			rs.onShared, rs.onError = t.sharedScore, t.flushFailed
			t.scores = rs
			var ro *shared
			ro, err = newShared(cfg.Scores, "o:", offHalf, maxKeys)
			if err == nil {
				ro.onError = t.flushFailed
				t.offences = ro
			}
		}
	} else {
		if t.scores, err = scores.NewMemory(half, maxKeys); err == nil {
			t.offences, err = scores.NewMemory(offHalf, maxKeys)
		}
	}
	if err != nil {
		return nil, bad("%v", err)
	}
	b, err := access.NewBans(maxKeys)
	if err != nil {
		return nil, err
	}
	if t.bans == nil {
		t.bans = localBans{b}
		t.match = t.bans
	} else {
		t.fallback = b
		t.match = eitherBans{t.bans, b}
	}
	return t, nil
}

// eitherBans matches the bans of Config.Bans, and those this server holds
// because writing them there failed (Tracker.fallback).
type eitherBans struct {
	shared   access.Matcher
	fallback *access.Bans
}

func (b eitherBans) Match(addr netip.Addr, key string, now time.Time) (access.Entry, bool) {
	if e, ok := b.shared.Match(addr, key, now); ok {
		return e, true
	}
	return b.fallback.Match(addr, key, now)
}

// localBans is an access.Bans as a Banner: the bans of one process.
type localBans struct{ *access.Bans }

func (b localBans) Ban(_ context.Context, e access.Entry, d time.Duration) (access.Entry, error) {
	return b.Bans.Ban(e, d)
}

// band returns the index of the band of score v, or -1 below every band.
func (t *Tracker) band(v float64) int {
	i := -1
	for j := range t.bands {
		if v > t.bands[j].Above {
			i = j
		}
	}
	return i
}

// Adjust scales p's Limit (and Burst) by the band of key's score (see
// Band.Scale), never into an invalid policy or a looser one: it is
// the core.PolicySource httplimit.WithReputation gives the Limiter. It
// reads the score this server holds: no I/O, no allocation.
func (t *Tracker) Adjust(_ context.Context, key string, p core.Policy) (core.Policy, error) {
	if t.shadow || !t.scales {
		return p, nil
	}
	if t.Untouched(key) {
		return p, nil // no client, or not this one, above a band that scales
	}
	i := t.band(t.scores.Get(key, t.now()))
	if i < 0 {
		return p, nil
	}
	if s := t.bands[i].Scale; s > 0 && s < 1 {
		// The one derivation of a scaled policy (as the overrides' and the
		// load signal's): rounded down, and what the scaled rate cannot
		// keep (a burst it takes longer than 366 days to refill) clamped
		// down, so that the band's policy is valid and no looser than the
		// scale asks, never one the Limiter would decide by its fail mode.
		p.Limit, p.Burst = limits.Derive(p.Algorithm, p.Limit, p.Window, p.Burst, s)
	}
	return p, nil
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

// banTimeout bounds a ban's write (over a client that honours context
// deadlines: go-redis's ContextTimeoutEnabled), and banPause is how long,
// after one failed, bans are held on this server without trying the
// shared ones: a frozen Redis costs one request banTimeout, not each.
const (
	banTimeout = time.Second
	banPause   = time.Second
)

// errBansPaused is why a ban is held on this server only while the
// shared bans are paused after a failure.
var errBansPaused = errors.New("reputation: shared bans paused after a failure")

// bannedNow reports whether key is banned now.
func (t *Tracker) bannedNow(key string) bool {
	_, ok := t.match.Match(netip.Addr{}, key, time.Now())
	return ok
}

// Untouched reports whether Adjust leaves every policy of key as it is,
// as core.SelectiveSource asks: a client in no band that scales.
func (t *Tracker) Untouched(key string) bool {
	// In shadow mode, and for a client not in the snapshot of suspects.
	if t.shadow || !t.scales {
		return true
	}
	m := t.suspects.Load()
	if m == nil {
		return true
	}
	_, ok := (*m)[key]
	return !ok
}

// suspect adds key, whose score is above scaleFrom, to the snapshot of
// suspects, unless it is in it already, or the snapshot is full and
// cannot be pruned yet (see maxSuspects).
func (t *Tracker) suspect(key string, now time.Time) {
	if m := t.suspects.Load(); m != nil {
		if _, ok := (*m)[key]; ok {
			return // the common case: no lock, no copy
		}
	}
	t.suspectsMu.Lock()
	defer t.suspectsMu.Unlock()
	old := t.suspects.Load()
	if old == nil {
		t.suspects.Store(&map[string]struct{}{key: {}})
		return
	}
	if _, ok := (*old)[key]; ok {
		return
	}
	prune := len(*old) >= maxSuspects && now.Sub(t.pruned) >= pruneEvery
	if len(*old) >= maxSuspects && !prune {
		return
	}
	m := make(map[string]struct{}, len(*old)+1)
	for k := range *old {
		if !prune || t.scores.Get(k, now) > t.scaleFrom {
			m[k] = struct{}{}
		}
	}
	if prune {
		t.pruned = now
	}
	if len(m) < maxSuspects {
		m[key] = struct{}{}
	}
	t.suspects.Store(&m)
}

// ban bans key, which entered band, for the length its offences earn,
// and reports whether it did (not in shadow mode).
func (t *Tracker) ban(ctx context.Context, key string, bi int) bool {
	band := t.bands[bi].Name
	now := t.now()
	offences := t.offences.Get(key, now)
	d := t.banFor
	for i := 0.0; i+0.5 < offences && d < t.banMax; i++ { // doubled for each offence remembered, rounded
		d *= 2
	}
	d = min(d, t.banMax)
	d = time.Duration(float64(d) * (0.9 + 0.2*rand.Float64())) // ±10%: banned clients do not return at one instant
	if t.shadow {
		t.shadowBans[bi].Add(1)
		t.log.Info("reputation: would ban (shadow mode)", "key", key, "band", band, "for", d)
		return false
	}
	if _, err := t.offences.Add(ctx, key, 1, now); err != nil {
		t.log.Warn("reputation: remembering an offence failed", "key", key, "error", err)
	}
	e := access.Entry{Key: key, Reason: "reputation: " + band}
	var err error
	if t.fallback == nil || time.Now().UnixNano() >= t.bansPaused.Load() {
		ctx, cancel := context.WithTimeout(ctx, banTimeout)
		_, err = t.bans.Ban(ctx, e, d)
		cancel()
		if err != nil && t.fallback != nil {
			t.bansPaused.Store(time.Now().Add(banPause).UnixNano())
		}
	} else {
		err = errBansPaused
	}
	if err != nil {
		if t.fallback == nil {
			t.log.Warn("reputation: banning failed", "key", key, "band", band, "error", err)
			return false
		}
		if _, ferr := t.fallback.Ban(e, d); ferr != nil {
			t.log.Warn("reputation: banning failed", "key", key, "band", band, "error", errors.Join(err, ferr))
			return false
		}
		t.log.Warn("reputation: banned on this server only: the shared bans failed", "key", key, "band", band, "for", d, "error", err)
	}
	t.banned[bi].Add(1)
	t.log.Info("reputation: banned", "key", key, "band", band, "for", d)
	return true
}

// ctxKey is the context key of a request's reputation (see Penalize).
type ctxKey struct{}

// reqRep is what Penalize needs of a request: its Tracker and key; and
// whether MarkUnrouted marked it.
type reqRep struct {
	t        *Tracker
	key      string
	unrouted atomic.Bool
}

// repCtx is a request's context carrying its reqRep: one allocation a
// request, where context.WithValue and the reqRep would be two.
type repCtx struct {
	context.Context
	rep reqRep
}

// Value returns the request's reqRep for ctxKey, and what the parent
// holds for any other key.
func (c *repCtx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return &c.rep
	}
	return c.Context.Value(key)
}

// Penalize scores bad behaviour the application saw of the client of the
// request whose context ctx is (see httplimit.Report for which context
// that is), of weight w (at most 2^20): a failed captcha, an invalid
// token, a request to a honeypot route. It counts as a Reported signal,
// and does nothing on a context no Tracker scores.
func Penalize(ctx context.Context, w float64) {
	if r, ok := ctx.Value(ctxKey{}).(*reqRep); ok && w > 0 {
		r.t.signal(context.WithoutCancel(ctx), r.key, Reported, min(w, scores.MaxWeight))
	}
}

// Record scores signal s, of its weight (Config.Weights), against the
// client key: what the HTTP flow calls for what it sees. A NotFound on a
// context MarkUnrouted marked counts as Unrouted. ctx bounds the writes
// to shared scores and bans, if any.
func (t *Tracker) Record(ctx context.Context, key string, s Signal) {
	t.signal(ctx, key, marked(ctx, s), -1)
}

// NewContext returns a context of the request whose client is key,
// derived from ctx: Penalize and MarkUnrouted, given it or a context
// derived from it, act on key's score through t.
func (t *Tracker) NewContext(ctx context.Context, key string) context.Context {
	return &repCtx{Context: ctx, rep: reqRep{t: t, key: key}}
}

// Bans returns the bans t makes, to enforce as a deny list; nil in shadow
// mode, which bans no one.
func (t *Tracker) Bans() access.Matcher {
	if t.shadow {
		return nil
	}
	return t.match
}

// Config returns t's configuration, as given to New.
func (t *Tracker) Config() Config {
	c := t.cfg
	c.Bands, c.Weights = slices.Clone(c.Bands), maps.Clone(c.Weights)
	return c
}

// Score returns key's score, as this server holds it.
func (t *Tracker) Score(key string) float64 {
	return t.scores.Get(key, t.now())
}

// String returns the signal's name, as metrics label it ("denied",
// "locked_out", ...).
func (s Signal) String() string {
	if s >= Denied && s <= Reported {
		return signalNames[s]
	}
	return fmt.Sprintf("Signal(%d)", uint8(s))
}

// Stats is what a Tracker has scored and done, for metrics.
type Stats struct {
	// Signals counts the signals scored, by kind: every kind, 0 included.
	Signals map[Signal]uint64
	// Bands are Config.Bands's, in order.
	Bands []BandStats
	// MaxScore and MeanScore are the highest and the mean score held in
	// process.
	MaxScore, MeanScore float64
}

// BandStats is what a band holds and has done.
type BandStats struct {
	// Name is the band's.
	Name string
	// Clients is how many clients this server holds in the band.
	Clients int
	// Bans counts the bans made as clients entered it, and ShadowBans
	// those that shadow mode did not make.
	Bans, ShadowBans uint64
}

// Stats returns what t has scored and done so far.
func (t *Tracker) Stats() Stats {
	st := Stats{Signals: make(map[Signal]uint64, Reported)}
	for s := Denied; s <= Reported; s++ {
		st.Signals[s] = t.signals[s].Load()
	}
	clients := make([]int, len(t.bands))
	n, sum := 0, 0.0
	t.scores.Range(t.now(), func(_ string, v float64) {
		if i := t.band(v); i >= 0 {
			clients[i]++
		}
		n++
		sum += v
		st.MaxScore = max(st.MaxScore, v)
	})
	if n > 0 {
		st.MeanScore = sum / float64(n)
	}
	st.Bands = make([]BandStats, len(t.bands))
	for i, b := range t.bands {
		st.Bands[i] = BandStats{Name: b.Name, Clients: clients[i], Bans: t.banned[i].Load(), ShadowBans: t.shadowBans[i].Load()}
	}
	return st
}
