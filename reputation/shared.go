package reputation

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/rules/scores"
)

// SharedScores holds the scores that every app server's Tracker shares:
// rediswatch.NewScores keeps them in Redis. Each server keeps a copy in
// process, which its decisions read, and sends the weights of its signals
// to AddScores, taking back the scores that every server's signals made.
type SharedScores interface {
	// AddScores adds weights[i] to the score of keys[i] at at[i], each
	// atomically, and sets scores[i] to the score after it and at[i] to
	// the time that score is as of; the slices are of one length. A
	// score is a value as of a time (to the microsecond): adding w at t
	// under halfLife makes it v·2^(-(t-at)/halfLife) + w as of t, v being
	// its value as of at; as of at when t is earlier (a clock stepping
	// back undoes no decay). A score decayed below 0.001 may be
	// forgotten. It returns nil, or an error for each key, nil for those
	// added. It must honour ctx's deadline.
	AddScores(ctx context.Context, halfLife time.Duration, keys []string, weights []float64, at []time.Time, scores []float64) []error
}

// shared keeps one set of a Tracker's scores in SharedScores (the
// clients' scores, or their offences). An Add counts in a copy in process
// at once, which Get reads (no round trip), and queues its weight. Sync,
// which a signal's request calls, sends a key's queued weights at once,
// one AddScores, and reads back the score every server's signals made,
// which the copy takes: the signal that takes a client across a band, on
// any server, is seen as such. But at most one Sync is under way per key
// on a server, none for syncPause after one failed, and each waits at
// most syncTimeout: what they leave queued (a flood's concurrent signals,
// a slow Redis's) a flusher goroutine, running while weights are queued,
// sends every flushEvery, one add per key with all its signals since
// (decayed to the newest, so that the sum is what one add a signal would
// have made), all the keys in one AddScores, and onShared hears each
// reply: a score raised on other servers is seen at this server's next
// Sync or flush of that key.
//
// So a key's concurrent signals cost Redis at most one script under way
// per server, and a slow or frozen Redis costs one request syncTimeout a
// syncPause, not every bad request a wait. What is queued when the
// process ends (at most flushEvery's worth) is lost, as a score is a
// hint, not a count; so is what a failed add carried (the copy keeps it).
type shared struct {
	remote   SharedScores
	set      string // before each key in remote: "s:", "o:"
	halfLife time.Duration
	hl       int64 // µs
	copy     *scores.Memory
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
	m       map[string]scores.Entry // the key's weights since its last flush, decayed to At
	syncing map[string]struct{}
	max     int
	_       [32]byte
}

// flushEvery is how often queued weights are sent.
const flushEvery = 100 * time.Millisecond

// syncTimeout bounds a Sync (over a client that honours context
// deadlines: go-redis's ContextTimeoutEnabled), and syncPause is how long
// Syncs are not tried after one failed: a slow or frozen Redis costs one
// signal syncTimeout, not every signal.
const (
	syncTimeout = 250 * time.Millisecond
	syncPause   = time.Second
)

// flushTimeout bounds a flush (a client that ignores context deadlines
// is bounded by its ReadTimeout instead), and flushBatch the adds of one
// AddScores.
const (
	flushTimeout = 2 * time.Second
	flushBatch   = 1000
)

// newShared returns the set of scores halving every halfLife kept in
// remote under keys set+key, with a copy in process of at most maxKeys
// keys, and as many queued at most.
func newShared(remote SharedScores, set string, halfLife time.Duration, maxKeys int) (*shared, error) {
	m, err := scores.NewMemory(halfLife, maxKeys)
	if err != nil {
		return nil, err
	}
	r := &shared{remote: remote, set: set, halfLife: halfLife, hl: halfLife.Microseconds(), copy: m,
		seed: maphash.MakeSeed(), queues: make([]queue, scores.Shards)}
	for i := range r.queues {
		r.queues[i] = queue{m: map[string]scores.Entry{}, syncing: map[string]struct{}{}, max: max(1, maxKeys/scores.Shards)}
	}
	return r, nil
}

// Add adds w to the score of key at now (the zero Time: time.Now), in the
// copy at once and in remote at the next Sync or flush, and returns the
// copy's score after it.
func (r *shared) Add(_ context.Context, key string, w float64, now time.Time) (float64, error) {
	if err := scores.Check(r.halfLife, w); err != nil {
		return 0, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	q := r.queue(key)
	q.mu.Lock()
	// Under q.mu, so that no flush's reply comes between the copy and the
	// queue. The weight is queued at the time the copy added it at: after
	// a clock stepped back, the last signal's, as the shared add does.
	c := r.copy.AddAt(key, w, now.UnixMicro())
	if w > 0 {
		if e, ok := q.m[key]; ok {
			q.m[key] = scores.Entry{V: scores.Decay(e.V, c.At-e.At, r.hl) + w, At: c.At}
		} else if len(q.m) < q.max {
			q.m[key] = scores.Entry{V: w, At: c.At}
		} // else a flood of distinct keys filled the queue: the weight counts in the copy only
	}
	q.mu.Unlock()
	if w > 0 && r.running.CompareAndSwap(false, true) {
		go r.flushLoop()
	}
	return c.V, nil
}

// Sync sends key's queued weights now, in one add, and returns the score
// every server's signals made (which the copy takes), and true; or false,
// sending nothing, when a Sync of key is already under way (the weights
// queued meanwhile go at the next flush), when a Sync failed less than
// syncPause ago, or when it fails (its error goes to onError). It is how
// a signal learns the shared score at once: in the request's path,
// bounded by syncTimeout, at most one at a time per key on this server.
func (r *shared) Sync(ctx context.Context, key string) (float64, bool) {
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
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	var one struct { // one allocation for the four slices
		keys    [1]string
		weights [1]float64
		at      [1]time.Time
		scores  [1]float64
	}
	b := batch{keys: one.keys[:0], weights: one.weights[:0], at: one.at[:0], scores: one.scores[:0]}
	b.push(r.set+key, e)
	err := r.send1(ctx, b)
	cancel()
	q.mu.Lock()
	delete(q.syncing, key)
	q.mu.Unlock()
	if err != nil {
		// Not queued again: the add may have been made all the same (a
		// timeout), and a score errs toward forgetting rather than
		// counting twice. The copy keeps it.
		r.paused.Store(time.Now().Add(syncPause).UnixNano())
		if r.onError != nil {
			r.onError(err)
		}
		return 0, false
	}
	_, after := r.take(key, b.scores[0], b.at[0].UnixMicro())
	return after, true
}

// queue returns key's queue.
func (r *shared) queue(key string) *queue {
	return &r.queues[maphash.String(r.seed, key)&uint64(len(r.queues)-1)]
}

// batch is the adds of one AddScores: a key each (the set's prefix
// before it), its weight and time, and the score AddScores sets.
type batch struct {
	keys    []string
	weights []float64
	at      []time.Time
	scores  []float64
}

// push appends the add of key's queued weights e.
func (b *batch) push(key string, e scores.Entry) {
	b.keys = append(b.keys, key)
	b.weights = append(b.weights, e.V)
	b.at = append(b.at, time.UnixMicro(e.At))
	b.scores = append(b.scores, 0)
}

// slice returns the adds i to j of b.
func (b batch) slice(i, j int) batch {
	return batch{keys: b.keys[i:j], weights: b.weights[i:j], at: b.at[i:j], scores: b.scores[i:j]}
}

// addScores sends b in one AddScores, and returns the error of each add:
// nil when every add was made and replied a valid score.
func (r *shared) addScores(ctx context.Context, b batch) []error {
	errs := r.remote.AddScores(ctx, r.halfLife, b.keys, b.weights, b.at, b.scores)
	if errs != nil && len(errs) != len(b.keys) {
		err := fmt.Errorf("reputation: sharing scores: %d errors for %d keys", len(errs), len(b.keys))
		errs = make([]error, len(b.keys))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, v := range b.scores {
		var err error
		if errs != nil && errs[i] != nil {
			err = fmt.Errorf("reputation: sharing a score: %w", errs[i])
		} else if !(v >= 0) {
			err = errors.New("reputation: sharing a score: a negative score")
		} else {
			continue
		}
		if errs == nil {
			errs = make([]error, len(b.keys))
		}
		errs[i] = err
	}
	return errs
}

// send1 sends b, of one add, and returns its error.
func (r *shared) send1(ctx context.Context, b batch) error {
	if errs := r.addScores(ctx, b); errs != nil {
		return errs[0]
	}
	return nil
}

// Get returns the score of key at now as this server last saw it.
func (r *shared) Get(key string, now time.Time) float64 { return r.copy.Get(key, now) }

// Range calls fn with every score this server holds a copy of (see
// scores.Memory.Range).
func (r *shared) Range(now time.Time, fn func(key string, v float64)) { r.copy.Range(now, fn) }

// flushLoop flushes every flushEvery while weights are queued, and ends
// when none are (the next Add starts another).
func (r *shared) flushLoop() {
	for {
		time.Sleep(flushEvery)
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
func (r *shared) queued() bool {
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

// Flush sends every queued weight now, and returns how many keys it sent
// and the first error. The flusher calls it; tests too, to see the
// shared scores without waiting.
func (r *shared) Flush(ctx context.Context) (int, error) {
	var b batch
	for i := range r.queues {
		q := &r.queues[i]
		q.mu.Lock()
		for k, e := range q.m {
			b.push(r.set+k, e)
		}
		clear(q.m)
		q.mu.Unlock()
	}
	sent := len(b.keys)
	var first error
	for i := 0; i < sent; i += flushBatch {
		if err := r.send(ctx, b.slice(i, min(sent, i+flushBatch))); err != nil && first == nil {
			first = err
		}
	}
	return sent, first
}

// send sends batch in one AddScores, and gives each reply to the copy and
// to onShared. A key whose add failed keeps what the copy has.
func (r *shared) send(ctx context.Context, b batch) error {
	errs := r.addScores(ctx, b)
	var first error
	for i, key := range b.keys {
		if errs != nil && errs[i] != nil {
			if first == nil {
				first = errs[i]
				r.paused.Store(time.Now().Add(syncPause).UnixNano())
			}
			continue
		}
		key = key[len(r.set):]
		before, after := r.take(key, b.scores[i], b.at[i].UnixMicro())
		if r.onShared != nil {
			r.onShared(key, before, after)
		}
	}
	return first
}

// take makes v, key's shared score at us µs, the copy's, plus what has
// been queued for key since the flush took its weights, and returns the
// copy's score before and after, both at the later of us and the copy's
// last signal. The copy never goes down by a reply: two replies for a key
// (a Sync's and a flush's) may come in either order, and the copy holds
// this server's signals already, so that a lower reply is an older one
// (or a Redis that lost the key: the copy errs toward counting until it
// decays).
func (r *shared) take(key string, v float64, us int64) (before, after float64) {
	q := r.queue(key)
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := r.copy.Last(key)
	at := us
	if ok {
		at = max(us, cur.At)
		before = scores.Decay(cur.V, at-cur.At, r.hl)
	}
	after = scores.Decay(v, at-us, r.hl)
	if p, ok := q.m[key]; ok {
		after += scores.Decay(p.V, at-p.At, r.hl)
	}
	after = max(after, before)
	r.copy.Put(key, scores.Entry{V: after, At: at})
	return before, after
}
