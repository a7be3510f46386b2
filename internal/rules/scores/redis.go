package scores

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed add.lua
var addSource string

var addScript = redis.NewScript(addSource)

// Redis keeps scores in Redis, shared by every app server. An Add counts
// in a copy in process at once, which Get reads (no round trip), and
// queues its weight for Redis. Sync, which a signal's request calls,
// sends a key's queued weights at once, one atomic add.lua, and reads
// back the score every server's signals made, which the copy takes: the
// signal that takes a client across a band, on any server, is seen as
// such. But at most one Sync is under way per key on a server, none for
// SyncPause after one failed, and each waits at most SyncTimeout: what
// they leave queued (a flood's concurrent signals, a slow Redis's) a
// flusher goroutine, running while weights are queued, sends every
// FlushEvery, one script per key with all its signals since (decayed to
// the newest, so that the sum is what one script a signal would have
// made), all the keys in one pipeline, and OnShared hears each reply: a
// score raised on other servers is seen at this server's next Sync or
// flush of that key.
//
// So a key's concurrent signals cost Redis at most one script under way
// per server, and a slow or frozen Redis costs one request SyncTimeout
// a SyncPause, not every bad request a wait. What is queued when the
// process ends (at most FlushEvery's worth) is lost, as a score is a
// hint, not a count; so is what a failed script carried (the copy keeps
// it).
type Redis struct {
	c        redis.UniversalClient
	prefix   string
	hl       int64
	copy     *Memory
	seed     maphash.Seed
	queues   []queue
	running  atomic.Bool
	paused   atomic.Int64 // no Sync before this time (ns): one failed
	onShared func(key string, before, after float64)
	onError  func(error)
}

// queue is a shard of the weights waiting for a flush, and of the keys
// with a Sync under way.
type queue struct {
	mu      sync.Mutex
	m       map[string]entry // the key's weights since its last flush, decayed to at
	syncing map[string]struct{}
	max     int
	_       [32]byte
}

// FlushEvery is how often queued weights are sent to Redis.
const FlushEvery = 100 * time.Millisecond

// SyncTimeout bounds a Sync (over a client that honours context
// deadlines: go-redis's ContextTimeoutEnabled), and SyncPause is how long
// Syncs are not tried after one failed: a slow or frozen Redis costs one
// signal SyncTimeout, not every signal.
const (
	SyncTimeout = 250 * time.Millisecond
	SyncPause   = time.Second
)

// flushTimeout bounds a flush (a client that ignores context deadlines
// is bounded by its ReadTimeout instead), and flushBatch the scripts of
// one pipeline.
const (
	flushTimeout = 2 * time.Second
	flushBatch   = 1000
)

// NewRedis returns a Redis store of scores halving every halfLife, under
// keys prefix+key, with a copy in process of at most maxKeys keys, and as
// many queued at most.
func NewRedis(c redis.UniversalClient, prefix string, halfLife time.Duration, maxKeys int) (*Redis, error) {
	if c == nil {
		return nil, fmt.Errorf("scores: nil Redis client")
	}
	m, err := NewMemory(halfLife, maxKeys)
	if err != nil {
		return nil, err
	}
	r := &Redis{c: c, prefix: prefix, hl: halfLife.Microseconds(), copy: m, seed: maphash.MakeSeed(), queues: make([]queue, memShards)}
	for i := range r.queues {
		r.queues[i] = queue{m: map[string]entry{}, syncing: map[string]struct{}{}, max: max(1, maxKeys/memShards)}
	}
	return r, nil
}

// OnShared sets fn to hear, after each flush, every key flushed: its score
// in the copy before the reply, and after (the shared score, plus what was
// queued meanwhile), at now. And onError the errors of flushes. Set them
// before the first Add.
func (r *Redis) OnShared(fn func(key string, before, after float64), onError func(error)) {
	r.onShared, r.onError = fn, onError
}

// Add adds w to the score of key at now (the zero Time: time.Now), in the
// copy at once and in Redis at the next flush, and returns the copy's
// score after it.
func (r *Redis) Add(_ context.Context, key string, w float64, now time.Time) (float64, error) {
	if err := check(time.Duration(r.hl)*time.Microsecond, w); err != nil {
		return 0, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	q := r.queue(key)
	q.mu.Lock()
	// Under q.mu, so that no flush's reply comes between the copy and the
	// queue. The weight is queued at the time the copy added it at: after
	// a clock stepped back, the last signal's, as add.lua adds it.
	c := r.copy.add(key, w, now.UnixMicro())
	if w > 0 {
		if e, ok := q.m[key]; ok {
			q.m[key] = entry{v: decay(e.v, c.at-e.at, r.hl) + w, at: c.at}
		} else if len(q.m) < q.max {
			q.m[key] = entry{v: w, at: c.at}
		} // else a flood of distinct keys filled the queue: the weight counts in the copy only
	}
	q.mu.Unlock()
	if w > 0 && r.running.CompareAndSwap(false, true) {
		go r.flushLoop()
	}
	return c.v, nil
}

// Sync sends key's queued weights to Redis now, in one script, and
// returns the score every server's signals made (which the copy takes),
// and true; or false, sending nothing, when a Sync of key is already
// under way (the weights queued meanwhile go at the next flush), when a
// Sync failed less than SyncPause ago, or when it fails (its error goes
// to the error function of OnShared). It is how a signal learns the
// shared score at once: in the request's path, bounded by SyncTimeout,
// at most one at a time per key on this server.
func (r *Redis) Sync(ctx context.Context, key string) (float64, bool) {
	if time.Now().UnixNano() < r.paused.Load() {
		return 0, false
	}
	q := r.queue(key)
	q.mu.Lock()
	e, ok := q.m[key]
	if _, busy := q.syncing[key]; busy || !ok {
		q.mu.Unlock()
		return 0, false
	}
	delete(q.m, key)
	q.syncing[key] = struct{}{}
	q.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	p := pending{key: key, e: e}
	p.cmd = addScript.Run(ctx, r.c, []string{r.prefix + key}, r.args(p)...)
	cancel()
	v, us, err := parseAdd(p.cmd)
	q.mu.Lock()
	delete(q.syncing, key)
	q.mu.Unlock()
	if err != nil {
		// Not queued again: the script may have run all the same (a
		// timeout), and a score errs toward forgetting rather than
		// counting twice. The copy keeps it.
		r.paused.Store(time.Now().Add(SyncPause).UnixNano())
		if r.onError != nil {
			r.onError(err)
		}
		return 0, false
	}
	_, after := r.shared(key, v, us)
	return after, true
}

// queue returns key's queue.
func (r *Redis) queue(key string) *queue {
	return &r.queues[maphash.String(r.seed, key)&uint64(len(r.queues)-1)]
}

// args are add.lua's arguments for p.
func (r *Redis) args(p pending) []any {
	return []any{strconv.FormatFloat(p.e.v, 'g', 17, 64), strconv.FormatInt(r.hl, 10), strconv.FormatInt(p.e.at, 10)}
}

// Get returns the score of key at now as this server last saw it.
func (r *Redis) Get(key string, now time.Time) float64 { return r.copy.Get(key, now) }

// Range calls fn with every score this server holds a copy of (see
// Memory.Range).
func (r *Redis) Range(now time.Time, fn func(key string, v float64)) { r.copy.Range(now, fn) }

// flushLoop flushes every FlushEvery while weights are queued, and ends
// when none are (the next Add starts another).
func (r *Redis) flushLoop() {
	for {
		time.Sleep(FlushEvery)
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		n, err := r.Flush(ctx)
		cancel()
		if err != nil && r.onError != nil {
			r.onError(err)
		}
		if n > 0 {
			continue
		}
		r.running.Store(false)
		if !r.queued() || !r.running.CompareAndSwap(false, true) {
			return // nothing queued, or an Add started another loop
		}
	}
}

// queued reports whether any weight is queued.
func (r *Redis) queued() bool {
	for i := range r.queues {
		q := &r.queues[i]
		q.mu.Lock()
		n := len(q.m)
		q.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// pending is a key's queued weight on its way to Redis.
type pending struct {
	key string
	e   entry
	cmd *redis.Cmd
}

// Flush sends every queued weight to Redis now, and returns how many keys
// it sent and the first error. The flusher calls it; tests too, to see
// the shared scores without waiting.
func (r *Redis) Flush(ctx context.Context) (int, error) {
	var batch []pending
	for i := range r.queues {
		q := &r.queues[i]
		q.mu.Lock()
		for k, e := range q.m {
			batch = append(batch, pending{key: k, e: e})
		}
		clear(q.m)
		q.mu.Unlock()
	}
	sent := len(batch)
	var first error
	for len(batch) > 0 {
		n := min(len(batch), flushBatch)
		if err := r.send(ctx, batch[:n]); err != nil && first == nil {
			first = err
		}
		batch = batch[n:]
	}
	return sent, first
}

// send sends batch in one pipeline, one add.lua a key (EVALSHA, then EVAL
// for those Redis does not have the script of), and gives each reply to
// the copy and to onShared. A key whose script failed keeps what the copy
// has.
func (r *Redis) send(ctx context.Context, batch []pending) error {
	args := r.args
	pipe := r.c.Pipeline()
	for i := range batch {
		batch[i].cmd = addScript.EvalSha(ctx, pipe, []string{r.prefix + batch[i].key}, args(batch[i])...)
	}
	_, _ = pipe.Exec(ctx) // each command's error is its own
	var retry []int
	for i, p := range batch {
		if err := p.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = r.c.Pipeline()
		for _, i := range retry {
			batch[i].cmd = addScript.Eval(ctx, pipe, []string{r.prefix + batch[i].key}, args(batch[i])...)
		}
		_, _ = pipe.Exec(ctx)
	}
	var first error
	for _, p := range batch {
		v, us, err := parseAdd(p.cmd)
		if err != nil {
			if first == nil {
				first = err
				r.paused.Store(time.Now().Add(SyncPause).UnixNano())
			}
			continue
		}
		before, after := r.shared(p.key, v, us)
		if r.onShared != nil {
			r.onShared(p.key, before, after)
		}
	}
	return first
}

// parseAdd reads add.lua's reply: the score after the add, and its time.
func parseAdd(cmd *redis.Cmd) (float64, int64, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return 0, 0, fmt.Errorf("scores: add: %w", err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("scores: add: a reply of %d values", len(res))
	}
	v, err := strconv.ParseFloat(res[0], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("scores: add: %w", err)
	}
	us, err := strconv.ParseInt(res[1], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("scores: add: %w", err)
	}
	if !(v >= 0) {
		return 0, 0, errors.New("scores: add: a negative score")
	}
	return v, us, nil
}

// shared makes v, key's shared score at us µs, the copy's, plus what has
// been queued for key since the flush took its weights, and returns the
// copy's score before and after, both at the later of us and the copy's
// last signal. The copy never goes down by a reply: two replies for a key
// (a Sync's and a flush's) may come in either order, and the copy holds
// this server's signals already, so that a lower reply is an older one
// (or a Redis that lost the key: the copy errs toward counting until it
// decays).
func (r *Redis) shared(key string, v float64, us int64) (before, after float64) {
	q := r.queue(key)
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := r.copy.entry(key)
	at := us
	if ok {
		at = max(us, cur.at)
		before = decay(cur.v, at-cur.at, r.hl)
	}
	after = decay(v, at-us, r.hl)
	if p, ok := q.m[key]; ok {
		after += decay(p.v, at-p.at, r.hl)
	}
	after = max(after, before)
	r.copy.put(key, entry{v: after, at: at})
	return before, after
}
