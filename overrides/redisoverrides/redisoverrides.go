// Package redisoverrides shares live limit overrides between every app
// server through a Redis hash: an operator sets "limit=500" for the
// "search" layer from one server, or with redis-cli, and every server
// decides by it within about a poll interval (250 ms by default, at most
// a second), without a restart.
//
//	w, err := redisoverrides.New(ctx, client)
//	...
//	defer w.Close()
//	limiter, err := httplimit.NewLayered(store, layers, core.WithPolicySource(w))
//	...
//	err = w.Put(ctx, "search", overrides.Override{Limit: 500}) // every server, within a second
//
// or by hand, on the servers' Redis:
//
//	HSET rl:overrides search "limit=500 burst=50"
//	HDEL rl:overrides search
//
// A [Watcher] is a core.PolicySource: its Adjust is one atomic load of an
// in-process overrides.Set, never I/O. A goroutine reads the hash every
// poll interval (WithPollInterval) with one script (EVALSHA), which sends
// the fields only when the hash changed. Each field is a layer's name
// (for a Limiter built by core.NewLimiter, its policy's name); its value
// is an Override in the text form of overrides.Parse.
//
// # Hostile or broken data
//
//   - A malformed field (a name that is no valid policy name, a value
//     that does not parse, one over overrides.MaxTextLen bytes) is logged
//     once (WithLogger) and keeps its last good value, or stays absent if
//     it never had one; the other fields load. The script sends a marker
//     instead of a value over MaxTextLen bytes, and cuts a name over
//     64, so that giant data never crosses the network.
//   - A value that parses but cannot apply to its layer's policy (a
//     burst its rate cannot refill within 366 days; see
//     overrides.Override) is not applied: the layer's last good override
//     stays in force for that policy, and the Watcher logs it once, when
//     a request first meets it. Put refuses such a value, for the
//     policies this Watcher has adjusted.
//   - A hash of more than WithMaxFields fields is refused whole: logged,
//     the last good overrides kept, no field sent.
//   - A field removed from the hash is removed.
//   - When Redis cannot be read, the last good overrides stay in force;
//     the outage and its end are logged once each.
//
// # A Redis that restarts empty
//
// A Redis without persistence comes back empty, which would silently lift
// every override. So the watchers keep a marker key beside the hash (in
// the hash's slot; see WithKey), set when the first Watcher starts and
// never deleted by this package. A read that finds the marker gone means
// Redis lost its data: the first Watcher to see it writes its last good
// overrides back (each field the hash lacks: one written since the loss
// wins), sets the marker and logs it, in one script; the other watchers
// then read the restored hash. A read that finds the marker and an empty
// hash means an operator cleared it: the overrides go. Put and Delete
// refuse to write while the marker is gone, and restore first, so that a
// write just after a restart does not mark the lost overrides as
// cleared. A Redis that restarts with its data (RDB, AOF) gives back the
// marker with the hash: nothing happens.
//
// To clear every override by hand, delete the hash (DEL rl:overrides),
// not the marker: a hash and marker both gone look like a lost Redis, and
// the watchers write back what they hold.
//
// The scripts need Redis 3.2 or later (HSTRLEN). On a Redis Cluster the
// hash and the marker share a slot, so each script touches one slot.
package redisoverrides

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/limits"
	"github.com/apigate/ratelimit/overrides"
	"github.com/apigate/ratelimit/overrides/internal/peer"
)

var (
	//go:embed read.lua
	readLua string
	//go:embed restore.lua
	restoreLua string
	//go:embed write.lua
	writeLua string

	readScript    = redis.NewScript(readLua)
	restoreScript = redis.NewScript(restoreLua)
	writeScript   = redis.NewScript(writeLua)
)

// pollTimeout bounds one read of the goroutine.
const pollTimeout = time.Second

// tooLong starts the value read.lua sends for a value over MaxTextLen.
const tooLong = "\x00"

var (
	// ErrTooManyFields is the error of a read (Sync, Put, Delete) that
	// found more fields than WithMaxFields in the hash.
	ErrTooManyFields = errors.New("redisoverrides: too many fields in the overrides hash")
	// ErrClosed is the error of a call on a closed Watcher.
	ErrClosed = errors.New("redisoverrides: watcher closed")
)

// Watcher keeps an in-process copy of the overrides hash, read every poll
// interval, and is the core.PolicySource that applies it; see the package
// doc. Its methods are safe for concurrent use. Close stops its
// goroutine.
type Watcher struct {
	client redis.UniversalClient
	cfg    config
	set    *overrides.Set // the overrides in force

	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	done      chan struct{} // closed when the goroutine has returned
	closeOnce sync.Once
	reads     atomic.Int64 // read scripts run, for tests

	mu      sync.Mutex        // serializes reads and writes of Redis; guards:
	digest  string            // read.lua's digest of the hash last applied
	bad     map[string]string // malformed fields logged, by name: their raw value
	down    bool              // the last read failed
	tooMany bool              // the last read found too many fields
}

var _ core.PolicySource = (*Watcher)(nil)

// New returns a Watcher of the hash (WithKey) on client: a *redis.Client,
// a *redis.ClusterClient or a Ring, which it does not own. It reads the
// hash before it returns, within ctx (a go-redis client bounds a read by
// ctx only with ContextTimeoutEnabled; else by its ReadTimeout), and
// fails when it cannot; it sets
// the marker (see the package doc) if none exists. A hash found malformed
// or too big does not fail New: it is logged, and the Watcher starts with
// the fields it could read. A nil client, or an option nil or refusing
// its value, is an error wrapping core.ErrInvalidOption. Close the
// Watcher when done.
func New(ctx context.Context, client redis.UniversalClient, opts ...Option) (*Watcher, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisoverrides.New: nil client", core.ErrInvalidOption)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: redisoverrides.New: nil %T", core.ErrInvalidOption, client)
	}
	cfg := defaults()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: redisoverrides.New: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	w := &Watcher{client: client, cfg: cfg, set: overrides.New(), bad: map[string]string{}, done: make(chan struct{})}
	if cfg.logger != nil {
		peer.SetLogger(w.set, cfg.logger)
	}
	w.mu.Lock()
	err := w.syncLocked(ctx)
	w.mu.Unlock()
	if err != nil && !errors.Is(err, ErrTooManyFields) {
		return nil, fmt.Errorf("redisoverrides.New: reading %q: %w", cfg.key, err)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.run()
	return w, nil
}

// Adjust returns p as the override of p.Name changes it, or p, as
// overrides.Set.Adjust does: an atomic load and a lookup, no I/O.
func (w *Watcher) Adjust(p core.Policy) core.Policy { return w.set.Adjust(p) }

// Snapshot returns a copy of the overrides in force, by layer name.
func (w *Watcher) Snapshot() map[string]overrides.Override { return w.set.Snapshot() }

// Sync reads the hash now, as the goroutine does every poll interval, and
// returns once the overrides in force are what it read. It fails when
// Redis cannot be read (the last good overrides stay), with
// ErrTooManyFields when the hash is refused, and with ErrClosed after
// Close. A malformed field is logged, not an error.
func (w *Watcher) Sync(ctx context.Context) error {
	if w.ctx.Err() != nil {
		return ErrClosed
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pollLocked(ctx)
}

// Put sets the override of layer in Redis, for every server; it is in
// force here before Put returns, on the other servers within a poll
// interval. It fails, writing nothing, when o does not validate, layer is
// no valid policy name, or o cannot apply to a policy of layer this
// Watcher has adjusted, as overrides.Set.Put refuses it (errors wrapping
// core.ErrInvalidOption), and when Redis cannot be written. If Redis lost
// its data, Put writes the last good overrides back first (see the
// package doc).
func (w *Watcher) Put(ctx context.Context, layer string, o overrides.Override) error {
	if err := peer.Check(w.set, layer, o); err != nil {
		return err
	}
	return w.write(ctx, layer, o)
}

// Delete removes the override of layer from Redis, for every server; it
// is lifted here before Delete returns, on the other servers within a
// poll interval. It fails when Redis cannot be written. If Redis lost its
// data, Delete writes the last good overrides back first, then deletes.
func (w *Watcher) Delete(ctx context.Context, layer string) error {
	return w.write(ctx, layer, overrides.Override{})
}

// write sets the field layer to o, or deletes it when o is zero, and
// applies the change here.
func (w *Watcher) write(ctx context.Context, layer string, o overrides.Override) error {
	if w.ctx.Err() != nil {
		return ErrClosed
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
			return fmt.Errorf("redisoverrides: writing %q of %q: %w", clip(layer), w.cfg.key, err)
		}
		if n == 1 {
			break
		}
		if attempt > 0 {
			return fmt.Errorf("redisoverrides: writing %q of %q: the marker %q is gone again after a restore", clip(layer), w.cfg.key, w.cfg.marker)
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
	// Put checked o against the policies the Watcher knew; one learned
	// since does not refuse it here (it is in Redis already): the Set
	// keeps it, and decides by the last good override where it cannot
	// apply, as it does with what it reads.
	if err := peer.Store(w.set, next); err != nil {
		// Unreachable: Put validated o, and the rest was in force.
		return fmt.Errorf("redisoverrides: applying %q: %w", clip(layer), err)
	}
	delete(w.bad, layer)
	w.digest = "" // the next poll applies the whole hash
	return nil
}

// Close stops the goroutine and waits for it to return; the overrides in
// force stay as they are. It always returns nil.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.cancel()
		<-w.done
	})
	return nil
}

// run polls every interval until Close.
func (w *Watcher) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.poll)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(w.ctx, pollTimeout)
			w.mu.Lock()
			_ = w.pollLocked(ctx)
			w.mu.Unlock()
			cancel()
		}
	}
}

// pollLocked reads the hash, logging an outage, and its end, once.
func (w *Watcher) pollLocked(ctx context.Context) error {
	err := w.syncLocked(ctx)
	switch {
	case err == nil || errors.Is(err, ErrTooManyFields):
		if w.down {
			w.down = false
			w.cfg.log().Info("redisoverrides: reading the overrides from Redis again",
				slog.String("key", w.cfg.key), slog.Int("overrides", len(w.set.Snapshot())))
		}
	case w.ctx.Err() != nil:
		// Closing.
	case !w.down:
		w.down = true
		w.cfg.log().Error("redisoverrides: cannot read the overrides from Redis; keeping the last good ones",
			slog.String("key", w.cfg.key), slog.Int("overrides", len(w.set.Snapshot())), slog.Any("error", err))
	}
	return err
}

// keys returns the scripts' KEYS.
func (w *Watcher) keys() []string { return []string{w.cfg.key, w.cfg.marker} }

// reply is what read.lua returns.
type reply struct {
	alive   bool
	count   int64
	digest  string
	changed bool
	fields  []string // name, value, name, value, ...
}

// read runs read.lua.
func (w *Watcher) read(ctx context.Context, digest string) (reply, error) {
	w.reads.Add(1)
	v, err := readScript.Run(ctx, w.client, w.keys(), w.cfg.maxFields, overrides.MaxTextLen, limits.MaxNameLen, digest).Slice()
	if err != nil {
		return reply{}, fmt.Errorf("redisoverrides: reading %q: %w", w.cfg.key, err)
	}
	if len(v) < 4 || len(v)%2 != 0 {
		return reply{}, fmt.Errorf("redisoverrides: reading %q: a reply of %d values", w.cfg.key, len(v))
	}
	alive, ok1 := v[0].(int64)
	count, ok2 := v[1].(int64)
	dig, ok3 := v[2].(string)
	changed, ok4 := v[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return reply{}, fmt.Errorf("redisoverrides: reading %q: a reply of %T, %T, %T, %T", w.cfg.key, v[0], v[1], v[2], v[3])
	}
	r := reply{alive: alive == 1, count: count, digest: dig, changed: changed == 1, fields: make([]string, 0, len(v)-4)}
	for _, x := range v[4:] {
		s, ok := x.(string)
		if !ok {
			return reply{}, fmt.Errorf("redisoverrides: reading %q: a field of %T", w.cfg.key, x)
		}
		r.fields = append(r.fields, s)
	}
	return r, nil
}

// syncLocked reads the hash, writes it back if Redis lost it, and applies
// it.
func (w *Watcher) syncLocked(ctx context.Context) error {
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
	if r.count > int64(w.cfg.maxFields) {
		if !w.tooMany {
			w.tooMany = true
			w.cfg.log().Error("redisoverrides: the overrides hash has too many fields; keeping the last good overrides",
				slog.String("key", w.cfg.key), slog.Int64("fields", r.count), slog.Int("max", w.cfg.maxFields))
		}
		return fmt.Errorf("%w: %q has %d, more than %d", ErrTooManyFields, w.cfg.key, r.count, w.cfg.maxFields)
	}
	if w.tooMany {
		w.tooMany = false
		w.cfg.log().Info("redisoverrides: the overrides hash is within its bound again",
			slog.String("key", w.cfg.key), slog.Int64("fields", r.count))
	}
	if r.changed && w.applyLocked(r.fields) {
		w.digest = r.digest
	}
	return nil
}

// restoreLocked writes the last good overrides back and sets the marker,
// unless another watcher did first.
func (w *Watcher) restoreLocked(ctx context.Context) error {
	last := w.set.Snapshot()
	args := make([]any, 0, 2*len(last))
	for name, o := range last {
		args = append(args, name, o.String())
	}
	n, err := restoreScript.Run(ctx, w.client, w.keys(), args...).Int64()
	if err != nil {
		return fmt.Errorf("redisoverrides: restoring %q: %w", w.cfg.key, err)
	}
	if n > 0 {
		w.cfg.log().Warn("redisoverrides: Redis lost the overrides (their marker key is gone); wrote the last good ones back",
			slog.String("key", w.cfg.key), slog.Int64("restored", n))
	}
	w.digest = ""
	return nil
}

// applyLocked makes fields (name, value, ...) the overrides in force: a
// malformed field keeps its last good value, or stays absent. An override
// that parses but cannot apply to its layer's policy (a burst its rate
// cannot refill within 366 days) is kept too, as the Set takes it:
// the Set's Adjust decides by the layer's last good override where it
// cannot apply, and logs that once. It reports whether it applied them.
func (w *Watcher) applyLocked(fields []string) bool {
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
		attrs := []any{slog.String("key", w.cfg.key), slog.String("field", clip(name)), slog.Any("error", err)}
		if had {
			attrs = append(attrs, slog.String("kept", kept.String()))
		}
		w.cfg.log().Warn("redisoverrides: malformed override in Redis; keeping its last good value", attrs...)
	}
	for name := range w.bad {
		if !seen[name] {
			delete(w.bad, name)
		}
	}
	if maps.Equal(next, last) {
		return true
	}
	if err := peer.Store(w.set, next); err != nil {
		// Unreachable: parseField checks each entry as Store does. Not
		// applied: the next poll reads the hash again.
		w.cfg.log().Error("redisoverrides: cannot apply the overrides", slog.Any("error", err))
		return false
	}
	return true
}

// parseField reads one field of the hash.
func parseField(name, value string) (overrides.Override, error) {
	if n, ok := strings.CutPrefix(value, tooLong); ok && n != "" && strings.Trim(n, "0123456789") == "" {
		return overrides.Override{}, fmt.Errorf("%w: override: a value of %s bytes, more than %d",
			core.ErrInvalidOption, n, overrides.MaxTextLen)
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
