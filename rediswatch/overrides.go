package rediswatch

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/overrides"
)

var (
	//go:embed overrides_read.lua
	overridesReadLua string
	//go:embed overrides_restore.lua
	overridesRestoreLua string
	//go:embed overrides_write.lua
	overridesWriteLua string

	readScript             = redis.NewScript(overridesReadLua)
	overridesRestoreScript = redis.NewScript(overridesRestoreLua)
	writeScript            = redis.NewScript(overridesWriteLua)
)

// tooLong starts the value overrides_read.lua sends for a value over
// limits.MaxOverrideText.
const tooLong = "\x00"

var (
	// errTooManyFields is the error of a read (a poll, Put, Delete) that
	// found more fields than WithMax in the hash.
	errTooManyFields = errors.New("rediswatch: too many fields in the overrides hash")
	// errClosed is the error of a call on a closed Overrides.
	errClosed = errors.New("rediswatch: overrides watcher closed")
)

// Overrides keeps an in-process copy of the overrides hash, read every
// poll interval, and is the core.PolicySource that applies it; see the
// package doc. Its methods are safe for concurrent use. Close stops its
// goroutine.
type Overrides struct {
	client redis.UniversalClient
	cfg    config
	marker string         // the marker key, beside the hash
	set    *overrides.Set // the overrides in force
	loop   loop
	reads  atomic.Int64 // read scripts run, for tests

	mu      sync.Mutex        // serializes reads and writes of Redis; guards:
	digest  string            // read.lua's digest of the hash last applied
	bad     map[string]string // malformed fields logged, by name: their raw value
	tooMany bool              // the last read found too many fields
}

var _ core.PolicySource = (*Overrides)(nil)

// overridesKind is what an Overrides takes of the options.
var overridesKind = kind{
	name: "NewOverrides", key: "rl:overrides", checkKey: checkHashKey,
	poll: 250 * time.Millisecond, most: time.Second,
	max: 10_000, top: 100_000,
}

// checkHashKey refuses an overrides key with braces that are no hash tag.
func checkHashKey(key string) error {
	if strings.ContainsAny(key, "{}") && tagOf(key) == "" {
		return errors.New(`braces that are no hash tag; give a tag ("{rl}:overrides") or no brace`)
	}
	return nil
}

// NewOverrides returns an Overrides of the hash (WithKey) on client: a
// *redis.Client, a *redis.ClusterClient or a Ring, which it does not own.
// It reads the hash before it returns, within ctx (a go-redis client
// bounds a read by ctx only with ContextTimeoutEnabled; else by its
// ReadTimeout), and fails when it cannot; it sets the marker (see the
// package doc) if none exists. A hash found malformed or too big does not
// fail NewOverrides: it is logged, and the Overrides starts with the
// fields it could read. A nil client, or an option nil or refusing its
// value, is an error wrapping core.ErrInvalidOption. Close the Overrides
// when done; ctx does not stop its goroutine.
func NewOverrides(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Overrides, error) {
	cfg, err := configure(overridesKind, client, opts)
	if err != nil {
		return nil, err
	}
	w := &Overrides{client: client, cfg: cfg, marker: markerOf(cfg.key), set: overrides.New(), bad: map[string]string{}}
	if cfg.logger != nil {
		w.set.SetLogger(cfg.logger)
	}
	w.mu.Lock()
	err = w.syncLocked(ctx)
	w.mu.Unlock()
	if err != nil && !errors.Is(err, errTooManyFields) {
		return nil, fmt.Errorf("rediswatch.NewOverrides: reading %q: %w", cfg.key, err)
	}
	w.loop.start(cfg.poll, w.poll)
	return w, nil
}

// Adjust returns p as the override of p.Name changes it, or p, as
// overrides.Set.Adjust does: an atomic load and a lookup, no I/O, and
// never an error (Redis out of reach leaves the last overrides read in
// force).
func (w *Overrides) Adjust(ctx context.Context, key string, p core.Policy) (core.Policy, error) {
	return w.set.Adjust(ctx, key, p)
}

// Snapshot returns a copy of the overrides in force, by layer name.
func (w *Overrides) Snapshot() map[string]overrides.Override { return w.set.Snapshot() }

// Put sets the override of layer in Redis, for every server; it is in
// force here before Put returns, on the other servers within a poll
// interval. It fails, writing nothing, when o does not validate, layer is
// no valid policy name, or o cannot apply to a policy of layer this
// Overrides has adjusted, as overrides.Set.Put refuses it (errors wrapping
// core.ErrInvalidOption), and when Redis cannot be written. If Redis lost
// its data, Put writes the last good overrides back first (see the
// package doc).
func (w *Overrides) Put(ctx context.Context, layer string, o overrides.Override) error {
	if err := w.set.Check(layer, o); err != nil {
		return err
	}
	return w.write(ctx, layer, o)
}

// Delete removes the override of layer from Redis, for every server; it
// is lifted here before Delete returns, on the other servers within a
// poll interval. It fails when Redis cannot be written. If Redis lost its
// data, Delete writes the last good overrides back first, then deletes.
func (w *Overrides) Delete(ctx context.Context, layer string) error {
	return w.write(ctx, layer, overrides.Override{})
}

// write sets the field layer to o, or deletes it when o is zero, and
// applies the change here.
func (w *Overrides) write(ctx context.Context, layer string, o overrides.Override) error {
	if w.loop.closed() {
		return errClosed
	}
	args := []any{layer}
	if o != (overrides.Override{}) {
		args = append(args, o.String())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for attempt := 0; ; attempt++ {
		n, err := writeScript.Run(ctx, w.client, w.keys(), args...).Int64()
		if err != nil {
			return fmt.Errorf("rediswatch: writing %q of %q: %w", cut(layer), w.cfg.key, err)
		}
		if n == 1 {
			break
		}
		if attempt > 0 {
			return fmt.Errorf("rediswatch: writing %q of %q: the marker %q is gone again after a restore", cut(layer), w.cfg.key, w.marker)
		}
		// Redis lost its data: write the last good overrides back first.
		if err := w.syncLocked(ctx); err != nil {
			return err
		}
	}
	next := w.set.Snapshot()
	if len(args) == 2 {
		next[layer] = o
	} else {
		delete(next, layer)
	}
	// Put checked o against the policies the Overrides knew; one learned
	// since does not refuse it here (it is in Redis already): the Set
	// keeps it, and decides by the last good override where it cannot
	// apply, as it does with what it reads.
	if err := w.set.Replace(next); err != nil {
		// Unreachable: Put validated o, and the rest was in force.
		return fmt.Errorf("rediswatch: applying %q: %w", cut(layer), err)
	}
	delete(w.bad, layer)
	w.digest = "" // the next poll applies the whole hash
	return nil
}

// Close stops the goroutine and waits for it to return; the overrides in
// force stay as they are, and Put and Delete fail. It may be called
// more than once, and returns nil.
func (w *Overrides) Close() error {
	w.loop.stop()
	return nil
}

// poll reads the hash; the loop calls it every poll interval.
func (w *Overrides) poll(base context.Context) {
	ctx, cancel := context.WithTimeout(base, pollTimeout)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.pollLocked(ctx)
}

// pollLocked reads the hash, logging an outage, and its end, once; a
// hash refused for its size was read.
func (w *Overrides) pollLocked(ctx context.Context) error {
	err := w.syncLocked(ctx)
	read := err
	if errors.Is(err, errTooManyFields) {
		read = nil
	}
	w.loop.report(read, w.cfg.log(), "overrides", len(w.set.Snapshot()), slog.String("key", w.cfg.key))
	return err
}

// keys returns the scripts' KEYS.
func (w *Overrides) keys() []string { return []string{w.cfg.key, w.marker} }

// reply is what read.lua returns.
type reply struct {
	alive   bool
	count   int64
	digest  string
	changed bool
	fields  []string // name, value, name, value, ...
}

// read runs read.lua.
func (w *Overrides) read(ctx context.Context, digest string) (reply, error) {
	w.reads.Add(1)
	v, err := readScript.Run(ctx, w.client, w.keys(), w.cfg.max, limits.MaxOverrideText, limits.MaxNameLen, digest).Slice()
	if err != nil {
		return reply{}, fmt.Errorf("rediswatch: reading %q: %w", w.cfg.key, err)
	}
	if len(v) < 4 || len(v)%2 != 0 {
		return reply{}, fmt.Errorf("rediswatch: reading %q: a reply of %d values", w.cfg.key, len(v))
	}
	alive, ok1 := v[0].(int64)
	count, ok2 := v[1].(int64)
	dig, ok3 := v[2].(string)
	changed, ok4 := v[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return reply{}, fmt.Errorf("rediswatch: reading %q: a reply of %T, %T, %T, %T", w.cfg.key, v[0], v[1], v[2], v[3])
	}
	r := reply{alive: alive == 1, count: count, digest: dig, changed: changed == 1, fields: make([]string, 0, len(v)-4)}
	for _, x := range v[4:] {
		s, ok := x.(string)
		if !ok {
			return reply{}, fmt.Errorf("rediswatch: reading %q: a field of %T", w.cfg.key, x)
		}
		r.fields = append(r.fields, s)
	}
	return r, nil
}

// syncLocked reads the hash, writes it back if Redis lost it, and applies
// it.
func (w *Overrides) syncLocked(ctx context.Context) error {
	r, err := w.read(ctx, w.digest)
	if err != nil {
		return err
	}
	if !r.alive {
		if err := w.restoreLocked(ctx); err != nil {
			return err
		}
		if r, err = w.read(ctx, ""); err != nil {
			return err
		}
	}
	if r.count > int64(w.cfg.max) {
		if !w.tooMany {
			w.tooMany = true
			w.cfg.log().Error("rediswatch: the overrides hash has too many fields; keeping the last good overrides",
				slog.String("key", w.cfg.key), slog.Int64("fields", r.count), slog.Int("max", w.cfg.max))
		}
		return fmt.Errorf("%w: %q has %d, more than %d", errTooManyFields, w.cfg.key, r.count, w.cfg.max)
	}
	if w.tooMany {
		w.tooMany = false
		w.cfg.log().Info("rediswatch: the overrides hash is within its bound again",
			slog.String("key", w.cfg.key), slog.Int64("fields", r.count))
	}
	if r.changed && w.applyLocked(r.fields) {
		w.digest = r.digest
	}
	return nil
}

// restoreLocked writes the last good overrides back and sets the marker,
// unless another watcher did first.
func (w *Overrides) restoreLocked(ctx context.Context) error {
	last := w.set.Snapshot()
	args := make([]any, 0, 2*len(last))
	for name, o := range last {
		args = append(args, name, o.String())
	}
	n, err := overridesRestoreScript.Run(ctx, w.client, w.keys(), args...).Int64()
	if err != nil {
		return fmt.Errorf("rediswatch: restoring %q: %w", w.cfg.key, err)
	}
	if n > 0 {
		w.cfg.log().Warn("rediswatch: Redis lost the overrides (their marker key is gone); wrote the last good ones back",
			slog.String("key", w.cfg.key), slog.Int64("restored", n))
	}
	w.digest = ""
	return nil
}

// applyLocked makes fields (name, value, ...) the overrides in force: a
// malformed field keeps its last good value, or stays absent. An override
// that parses but cannot apply to its layer's policy (a burst its rate
// cannot refill within limits.MaxWindow) is kept too, as the Set takes it:
// the Set's Adjust decides by the layer's last good override where it
// cannot apply, and logs that once. It reports whether it applied them.
func (w *Overrides) applyLocked(fields []string) bool {
	last := w.set.Snapshot()
	next := make(map[string]overrides.Override, len(fields)/2)
	seen := make(map[string]bool, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		name, value := fields[i], fields[i+1]
		seen[name] = true
		o, err := parseField(name, value)
		if err == nil {
			next[name] = o
			delete(w.bad, name)
			continue
		}
		kept, had := last[name]
		if had {
			next[name] = kept
		}
		if prev, logged := w.bad[name]; logged && prev == value {
			continue
		}
		w.bad[name] = value
		attrs := []any{slog.String("key", w.cfg.key), slog.String("field", cut(name)), slog.Any("error", err)}
		if had {
			attrs = append(attrs, slog.String("kept", kept.String()))
		}
		w.cfg.log().Warn("rediswatch: malformed override in Redis; keeping its last good value", attrs...)
	}
	for name := range w.bad {
		if !seen[name] {
			delete(w.bad, name)
		}
	}
	if maps.Equal(next, last) {
		return true
	}
	if err := w.set.Replace(next); err != nil {
		// Unreachable: parseField checks each entry as Store does. Not
		// applied: the next poll reads the hash again.
		w.cfg.log().Error("rediswatch: cannot apply the overrides", slog.Any("error", err))
		return false
	}
	return true
}

// parseField reads one field of the hash.
func parseField(name, value string) (overrides.Override, error) {
	if n, ok := strings.CutPrefix(value, tooLong); ok && n != "" && strings.Trim(n, "0123456789") == "" {
		return overrides.Override{}, fmt.Errorf("%w: override: a value of %s bytes, more than %d",
			core.ErrInvalidOption, n, limits.MaxOverrideText)
	}
	o, err := overrides.Parse(value)
	if err != nil {
		return overrides.Override{}, err
	}
	if err := overrides.New().Put(name, o); err != nil {
		return overrides.Override{}, err
	}
	return o, nil
}

// cut shortens s for a message.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// tagOf returns key's Redis Cluster hash tag, or "" when it has none: what
// lies between its first '{' and the first '}' after it, when not empty.
func tagOf(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}

// markerOf returns the marker key of the hash key, in the same slot: a
// key without a tag hashes as a tag of the whole key would.
func markerOf(key string) string {
	if tagOf(key) != "" {
		return key + ":alive"
	}
	return "{" + key + "}:alive"
}
