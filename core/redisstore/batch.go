package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// maxBatch is the most decisions one pipeline carries.
const maxBatch = 128

// queueLen is how many decisions may wait for a flusher.
const queueLen = 4096

// errExpired completes a call whose deadline passed before a flusher
// reached it: it is never sent.
var errExpired = errors.New("redisstore: deadline passed before the request was sent")

// batcher hands decisions to flusher goroutines, each of which sends what
// has queued while the others were busy as one pipeline (one write, one
// read); a lone decision goes out at once, as a plain command. A decision
// asked while no other is in the batcher runs on its caller's goroutine
// instead, over direct (see alone), sparing the two goroutine switches of a
// handoff.
type batcher struct {
	client   *redis.Client
	direct   *redis.Client // for lone decisions: deadlines in every phase, no retries, a pool of its own (see newDirect)
	retries  bool          // client retries a failed command
	inside   atomic.Int32  // callers in do
	queue    chan *call
	start    sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	flushers int
	idle     atomic.Int32 // flushers waiting for a call
	running  atomic.Int32 // flushers
	progress atomic.Int64 // when a flusher last finished a batch, or an extra was started, in Unix ns
}

// stuckAfter is how long every flusher may be busy, without one finishing
// a batch, before a caller starts another: so that a Redis that stopped
// answering holds only the calls sent to it, as a goroutine per call
// would, and the calls behind them reach the client (whose hooks see
// them) instead of waiting in the queue for their deadlines.
const stuckAfter = 10 * time.Millisecond

// maxAlone is the longest time to its deadline of a decision run alone on
// its caller's goroutine (see batcher.alone). Such a decision ends by its
// deadline, not when its caller leaves, so a decision given longer goes
// to the flushers, and its caller may stop waiting at once.
const maxAlone = time.Second

// maxRunning caps the flushers, the extra ones included.
const maxRunning = 4096

// newBatcher returns the batcher of client: GOMAXPROCS flushers (at least
// two, at most the client's PoolSize), so that concurrent decisions share
// few pipelines, plus extras while those are stuck (see unstick); lone
// decisions run over a client of its own (see newDirect), whose reads
// spin for up to spin.
func newBatcher(client *redis.Client, spin time.Duration) *batcher {
	n := max(2, runtime.GOMAXPROCS(0))
	if o := client.Options(); o.PoolSize > 0 {
		n = min(n, o.PoolSize)
	}
	hookOnce(client)
	return &batcher{client: client, direct: newDirect(client, spin), retries: client.Options().MaxRetries > 0,
		queue: make(chan *call, queueLen), stop: make(chan struct{}), flushers: n}
}

// hooked holds the *redis.Client values that have aloneHook; an entry goes
// with its client.
var (
	hooked   sync.Map // weak.Pointer[redis.Client] -> struct{}
	hookedMu sync.Mutex
)

// hookOnce adds aloneHook to client, on the first Store over client.
func hookOnce(client *redis.Client) {
	k := weak.Make(client)
	if _, ok := hooked.Load(k); ok {
		return
	}
	hookedMu.Lock()
	defer hookedMu.Unlock()
	if _, ok := hooked.Load(k); ok {
		return
	}
	client.AddHook(aloneHook{})
	hooked.Store(k, struct{}{})
	runtime.AddCleanup(client, func(k weak.Pointer[redis.Client]) { hooked.Delete(k) }, k)
}

// newDirect returns the client over which a batcher runs a lone decision
// (see batcher.alone): client's options (address, credentials, database,
// protocol, TLS, dialer), with a pool of its own of at most two
// connections (one is in use at a time: a batcher runs one decision alone
// at a time; the other replaces one a deadline broke), opened as lone
// decisions need them, whose reads spin for up to spin before they park
// (see busyConn). ContextTimeoutEnabled with zero timeouts puts a
// decision's deadline on its dial, its connection's handshake, and its
// write and read; with no retries it is one attempt, so it ends by that
// deadline. It has none of client's hooks: aloneHook sends it a command
// after they have run.
func newDirect(client *redis.Client, spin time.Duration) *redis.Client {
	// client's options as WithTimeout copies them: under the lock that
	// guards what go-redis writes in them as connections start (a bare
	// copy of client.Options() races with that), the maintenance
	// notifications' configuration copied too. The clone is used for
	// nothing else (closing it would close client's pool).
	o := *client.WithTimeout(0).Options()
	// No retries: -1, as NewClient reads 0 as its default of 3.
	o.ContextTimeoutEnabled, o.MaxRetries = true, -1
	// Made anew by NewClient: the push notification processor (its
	// handlers are client's); no client-side cache (scripts are never
	// cached).
	o.PushNotificationProcessor = nil
	o.ClientSideCache, o.ClientSideCacheConfig = nil, nil
	o.PoolSize = min(2, max(o.PoolSize, 1))
	o.MinIdleConns, o.MaxActiveConns = 0, 0
	if runtime.NumCPU() < 2 {
		// One CPU: while the caller polls, a Redis on the same machine
		// could not answer.
		spin = 0
	}
	if dial := o.Dialer; dial != nil && spin > 0 {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return busyPoll(conn, spin), nil
		}
	}
	return redis.NewClient(&o).WithTimeout(0)
}

// aloneKey is the context key under which a call run alone gives the
// direct client to run it over (see call.Value).
type aloneKey struct{}

// aloneHook is the innermost of a client's hooks when the first Store over
// the client adds it: a command of a call run alone goes through the hooks
// added before it (a user's tracing, say), and then, in place of the
// client's own processing, to the direct client its context names. Every other
// command passes on untouched.
type aloneHook struct{}

// DialHook passes next on.
func (aloneHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sends the commands of calls run alone over their direct client.
func (aloneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if d, _ := ctx.Value(aloneKey{}).(*redis.Client); d != nil {
			return d.Process(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook passes next on.
func (aloneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// alone runs c, the only decision in the batcher, on the caller's
// goroutine over the Store's direct client, which bounds every phase of a
// command by c's deadline: so that a decision without concurrency costs
// what one EVALSHA costs, no goroutine switch, and still returns by its
// deadline however the client is configured. c is the command's context:
// the caller's values, c's deadline, and done at that deadline (c's
// expire timer closes abort: a call whose timer fired is burnt, never
// pooled again); not the caller's cancellation, as in the batch: a client
// that disconnects does not abort a decision in flight. A command that
// fails but for its deadline or a Redis error reply (a stale connection,
// say), while time is left and the client would retry, goes to the
// flushers, which retry as the client does.
func (b *batcher) alone(ctx context.Context, c *call) (retry bool) {
	if c.expire == nil {
		c.expire = time.AfterFunc(time.Until(c.deadline), func() { close(c.abort) })
	} else {
		c.expire.Reset(time.Until(c.deadline))
	}
	c.alone = b.direct
	c.run(c, b.client)
	c.alone = nil
	stopped := c.expire.Stop()
	c.burnt = !stopped // its abort is closed, or about to be
	if c.err == nil {
		return false
	}
	if !stopped || !time.Now().Before(c.deadline) {
		// Ended by its deadline: the same error as a call the batch gave
		// up on, with the client's.
		if !errors.Is(c.err, context.DeadlineExceeded) {
			c.err = fmt.Errorf("%w: %w", context.DeadlineExceeded, c.err)
		}
		return false
	}
	if !b.retries || ctx.Err() != nil {
		return false
	}
	var reply redis.Error
	if errors.As(c.err, &reply) || errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, redis.ErrClosed) {
		return false
	}
	c.reset(c.multi)
	return true
}

// do sends c and waits for its reply until its deadline or ctx's end. It
// returns false, with the error of the wait, when it stopped waiting after
// c was queued: c then belongs to the flusher, which drops it.
func (b *batcher) do(ctx context.Context, c *call) (bool, error) {
	select {
	case <-b.stop:
		return true, redis.ErrClosed
	default:
	}
	if !time.Now().Before(c.deadline) {
		return true, context.DeadlineExceeded // never sent
	}
	if err := ctx.Err(); err != nil {
		return true, err // never sent
	}
	defer b.inside.Add(-1)
	if b.inside.Add(1) == 1 && time.Until(c.deadline) <= maxAlone && !b.alone(ctx, c) {
		return true, nil
	}
	b.start.Do(func() {
		b.progress.Store(time.Now().UnixNano())
		b.running.Add(int32(b.flushers))
		for range b.flushers {
			go b.flush(false)
		}
	})
	// The timer wakes the caller at the deadline, and every stuckAfter
	// before it, to check on the flushers.
	t := timerPool.Get().(*time.Timer)
	t.Reset(min(time.Until(c.deadline), stuckAfter))
	defer func() {
		t.Stop()
		timerPool.Put(t)
	}()
	queued := false
	for !queued {
		select {
		case b.queue <- c:
			queued = true
			b.unstick()
		case <-t.C:
			if !b.rearm(t, c) {
				return true, context.DeadlineExceeded // never queued: still the caller's
			}
		case <-ctx.Done():
			return true, ctx.Err()
		case <-b.stop:
			return true, redis.ErrClosed
		}
	}
	var err error
wait:
	for {
		select {
		case <-c.done:
			return true, nil
		case <-t.C:
			if !b.rearm(t, c) {
				err = context.DeadlineExceeded
				break wait
			}
			if !c.taken.Load() {
				b.unstick()
			}
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
	}
	if c.state.CompareAndSwap(callPending, callAbandoned) {
		// Never pooled again: abort may close.
		if err == context.DeadlineExceeded {
			close(c.abort)
		} else {
			time.AfterFunc(time.Until(c.deadline), func() { close(c.abort) })
		}
		return false, err
	}
	<-c.done // completed meanwhile
	return true, nil
}

// rearm sets t to fire at c's deadline or in stuckAfter, whichever is
// sooner, and reports false, setting nothing, when the deadline has
// passed.
func (b *batcher) rearm(t *time.Timer, c *call) bool {
	left := time.Until(c.deadline)
	if left <= 0 {
		return false
	}
	t.Reset(min(left, stuckAfter))
	return true
}

// unstick starts an extra flusher, for the call just queued, when every
// flusher is busy and none has finished a batch, nor has another extra
// been started, for stuckAfter: at most one extra per stuckAfter, so that
// a merely slow Redis does not get a storm of them.
func (b *batcher) unstick() {
	if b.idle.Load() != 0 || b.running.Load() >= maxRunning {
		return
	}
	now, last := time.Now().UnixNano(), b.progress.Load()
	if now-last > int64(stuckAfter) && b.progress.CompareAndSwap(last, now) {
		b.running.Add(1)
		go b.flush(true)
	}
}

// close stops the flushers once the queue is empty of waiting callers.
func (b *batcher) close() {
	b.stopOnce.Do(func() {
		close(b.stop)
		_ = b.direct.Close()
	})
}

// flush is one flusher: it takes the first call waiting, and every call
// queued behind it, up to maxBatch, and sends them. An extra flusher
// (started while the others are stuck) returns once the queue is empty.
func (b *batcher) flush(extra bool) {
	defer b.running.Add(-1)
	batch := make([]*call, 0, maxBatch)
	cmds := make([]redis.Cmder, 0, maxBatch)
	for {
		var c *call
		if extra {
			select {
			case c = <-b.queue:
			default:
				return
			}
		} else {
			b.idle.Add(1)
			select {
			case c = <-b.queue:
			case <-b.stop:
				b.idle.Add(-1)
				return
			}
			b.idle.Add(-1)
		}
		batch = append(batch[:0], c)
	more:
		for len(batch) < maxBatch {
			select {
			case c = <-b.queue:
				batch = append(batch, c)
			default:
				break more
			}
		}
		b.send(batch, cmds[:0])
		b.progress.Store(time.Now().UnixNano())
	}
}

// send runs the live calls of batch, one pipeline for several, and
// completes every call.
func (b *batcher) send(batch []*call, cmds []redis.Cmder) {
	now := time.Now()
	live := batch[:0]
	var latest *call
	for _, c := range batch {
		c.taken.Store(true)
		if !now.Before(c.deadline) || c.state.Load() != callPending {
			c.err = errExpired
			complete(c)
			continue
		}
		if latest == nil || c.deadline.After(latest.deadline) {
			latest = c
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// The call with the latest deadline is the batch's context: its
	// values go to the client's hooks, and it ends when every call of the
	// batch has expired.
	var ctx context.Context = latest
	if len(live) == 1 {
		live[0].run(ctx, b.client)
		complete(live[0])
		return
	}
	b.pipeline(ctx, live, cmds, false)
	retry := live[:0]
	for _, c := range live {
		if noScript(c.cmd.Err()) {
			retry = append(retry, c)
			continue
		}
		c.reply, c.err = c.cmd.Val(), c.cmd.Err()
		complete(c)
	}
	if len(retry) == 0 {
		return
	}
	b.pipeline(ctx, retry, cmds, true)
	for _, c := range retry {
		c.reply, c.err = c.cmd.Val(), c.cmd.Err()
		complete(c)
	}
}

// pipeline sends the commands of calls as one pipeline.
func (b *batcher) pipeline(ctx context.Context, calls []*call, cmds []redis.Cmder, eval bool) {
	cmds = cmds[:0]
	for _, c := range calls {
		cmds = append(cmds, c.command(eval))
	}
	_, _ = b.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = p.Process(ctx, cmd)
		}
		return nil
	})
}

// complete hands c's result to its caller, or drops c if the caller left.
func complete(c *call) {
	if c.state.CompareAndSwap(callPending, callDone) {
		c.done <- struct{}{}
	}
}

// Close stops the Store's flusher goroutines (see Take), if it started
// any; decisions asked of it afterwards fail. It
// does not close the client.
func (s *Store) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	return nil
}
