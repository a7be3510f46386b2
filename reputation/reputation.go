package reputation

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/scores"
	"github.com/apigate/ratelimit/keyfuncs"
)

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
	// Now is the clock scores decay by (bans run on the real clock):
	// time.Now when nil. Tests set it.
	Now func() time.Time
}

// store is what a Tracker keeps scores in: a scores.Memory, or a shared
// set of scores.
type store interface {
	Add(ctx context.Context, key string, w float64, now time.Time) (float64, error)
	Get(key string, now time.Time) float64
	Range(now time.Time, fn func(key string, v float64))
}

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
	// band (in shadow mode, those not made).
	signals [Reported + 1]atomic.Uint64
	banned  []atomic.Uint64
}

// maxKeys bounds the scores and offences a Tracker holds in process.
const maxKeys = 100_000

// New returns a Tracker configured by cfg. A configuration that cannot be
// carried out is an error wrapping core.ErrInvalidOption: no band, bands
// out of order, a Scale out of (0, 1], an unknown signal, a weight out
// of range, a negative duration.
func New(cfg Config) (*Tracker, error) {
	if err := check(cfg); err != nil {
		return nil, err
	}
	t := &Tracker{cfg: cfg, bands: slices.Clone(cfg.Bands), bans: cfg.Bans, shadow: cfg.Shadow, now: cfg.Now, log: slog.Default()}
	if t.now == nil {
		t.now = time.Now
	}
	t.cfg.Bands, t.cfg.Weights = slices.Clone(cfg.Bands), maps.Clone(cfg.Weights)
	t.banned = make([]atomic.Uint64, len(t.bands))
	copy(t.weights[:], defaultWeights[:])
	for s, w := range cfg.Weights {
		t.weights[s] = w
	}
	for _, b := range t.bands {
		if b.Scale > 0 && b.Scale < 1 && !t.scales {
			t.scales, t.scaleFrom = true, b.Above
		}
	}
	t.banFor = cmp.Or(cfg.BanFor, time.Minute)
	t.banMax = max(cmp.Or(cfg.BanMax, 24*time.Hour), t.banFor)
	if err := t.openScores(cfg.Scores, cmp.Or(cfg.HalfLife, 10*time.Minute), cmp.Or(cfg.OffenceHalfLife, 24*time.Hour)); err != nil {
		return nil, invalid("%v", err)
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

// invalid is New's error for a configuration it cannot carry out.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: reputation: %s", core.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// check returns the error of a configuration New cannot carry out.
func check(cfg Config) error {
	if len(cfg.Bands) == 0 {
		return invalid("no band: a reputation that does nothing")
	}
	for i, b := range cfg.Bands {
		switch {
		case b.Name == "":
			return invalid("band %d has no name", i)
		case !(b.Above >= 0):
			return invalid("band %q: Above %v below 0", b.Name, b.Above)
		case i > 0 && !(b.Above > cfg.Bands[i-1].Above):
			return invalid("band %q: Above %v not above the band before it", b.Name, b.Above)
		case !(b.Scale >= 0 && b.Scale <= 1):
			return invalid("band %q: Scale %v out of (0, 1]", b.Name, b.Scale)
		case b.Ban && cfg.Scores != nil && cfg.Bans == nil:
			// Scores every server shares, and bans only this one holds: the
			// ban would not hold on the others.
			return invalid("band %q bans, and the scores are shared: Config.Bans must be bans every server holds (rediswatch.NewBans)", b.Name)
		}
	}
	for _, d := range []time.Duration{cfg.HalfLife, cfg.BanFor, cfg.BanMax, cfg.OffenceHalfLife} {
		if d < 0 {
			return invalid("a negative duration, %v", d)
		}
	}
	for s, w := range cfg.Weights {
		if s < Denied || s > Reported {
			return invalid("unknown signal %d", s)
		}
		if !(w >= 0 && w <= scores.MaxWeight) {
			return invalid("signal %d: weight %v out of [0, 2^20]", s, w)
		}
	}
	return nil
}

// openScores opens the scores, halving every half, and the offences,
// every offHalf: in shared when it is set, else in process.
func (t *Tracker) openScores(shared SharedScores, half, offHalf time.Duration) error {
	if shared == nil {
		var err error
		if t.scores, err = scores.NewMemory(half, maxKeys); err != nil {
			return err
		}
		t.offences, err = scores.NewMemory(offHalf, maxKeys)
		return err
	}
	s, err := newShared(shared, "s:", half, maxKeys)
	if err != nil {
		return err
	}
	s.onShared, s.onError = t.sharedScore, t.flushFailed
	o, err := newShared(shared, "o:", offHalf, maxKeys)
	if err != nil {
		return err
	}
	o.onError = t.flushFailed
	t.scores, t.offences = s, o
	return nil
}

// Config returns t's configuration, as given to New.
func (t *Tracker) Config() Config {
	c := t.cfg
	c.Bands, c.Weights = slices.Clone(c.Bands), maps.Clone(c.Weights)
	return c
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
