package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script run: its command's arguments live in the call itself,
// as pointers the client writes without boxing, so that a call from the
// pool costs no allocation but its command and reply.
type call struct {
	key, lock string
	sha, src  string // of the script
	nkeys     int64
	ints      [9]int64 // ARGV but the time: limit, window, capacity, cost, (time), min TTL, lockout
	args      [16]any
	nargs     int
	cmd       *redis.IntSliceCmd
	multi     *multiCall // a layered decision's arguments, in place of the above (Take of several)

	parent   context.Context // the caller's: its values, not its cancellation
	deadline time.Time
	state    atomic.Int32  // callPending, callDone or callAbandoned
	done     chan struct{} // receives once the call is done
	taken    atomic.Bool   // a flusher has taken the call from the queue
	abort    chan struct{} // closed when the caller abandoned the call and its deadline passed, or by expire
	expire   *time.Timer   // closes abort at the deadline of a call run alone (see batcher.alone)
	burnt    bool          // expire fired: abort is closed, and the call is not pooled again
	alone    *redis.Client // while the call runs alone, the direct client it runs over
	reply    []int64
	err      error
}

const (
	callPending int32 = iota
	callDone
	callAbandoned
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1), abort: make(chan struct{})} }}

// A call is the context its command runs with, so that a batch costs no
// context of its own: the caller's values, the caller's deadline, and done
// once the caller has abandoned the call and the deadline has passed (so
// that the client stops retrying). The caller's cancellation does not end
// it: a client that disconnects does not abort a call in flight.
var _ context.Context = (*call)(nil)

// Deadline returns the caller's deadline.
func (c *call) Deadline() (time.Time, bool) { return c.deadline, true }

// Done is closed once the caller has left and the deadline has passed
// (or, for a call run alone, at the deadline).
func (c *call) Done() <-chan struct{} { return c.abort }

// Err returns context.DeadlineExceeded once Done is closed.
func (c *call) Err() error {
	select {
	case <-c.abort:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Value returns the caller's value for key (nil once the call is over:
// the context is for the command's run, not to be kept).
func (c *call) Value(key any) any {
	if _, ok := key.(aloneKey); ok {
		return c.alone
	}
	if p := c.parent; p != nil {
		return p.Value(key)
	}
	return nil
}

// timerPool holds stopped timers (their channels empty: Go 1.23 timers).
var timerPool = sync.Pool{New: func() any { return time.NewTimer(time.Hour) }}

// prepare fills c's arguments for the script s over keys key (and lock,
// when not empty), with ARGV ints, now standing in ARGV[5] ("" for Redis
// TIME, else the time in µs).
func (c *call) prepare(sc *redis.Script, src, key, lock string, explicit bool, ints ...int64) {
	c.key, c.lock, c.sha, c.src = key, lock, sc.Hash(), src
	c.reset(nil)
	n := 0
	c.args[n], c.args[n+1] = "evalsha", &c.sha
	n += 2
	if lock == "" {
		c.nkeys = 1
		c.args[n+1] = &c.key
		n += 2
	} else {
		c.nkeys = 2
		c.args[n+1], c.args[n+2] = &c.key, &c.lock
		n += 3
	}
	c.args[2] = c.nkeys // below 256: boxed without allocating
	copy(c.ints[:], ints)
	for i := range ints {
		if i == 4 && !explicit {
			c.args[n] = ""
		} else {
			c.args[n] = &c.ints[i]
		}
		n++
	}
	c.nargs = n
}

// reset readies c, from the pool, for a run of the script of m (nil for
// c's own arguments).
func (c *call) reset(m *multiCall) {
	c.err, c.reply, c.cmd, c.multi = nil, nil, nil, m
	c.state.Store(callPending)
	c.taken.Store(false)
}

// command returns a new command of c: EVALSHA, or EVAL with the source.
func (c *call) command(eval bool) *redis.IntSliceCmd {
	if m := c.multi; m != nil {
		c.cmd = redis.NewIntSliceCmd(context.Background(), m.command(eval)...)
		return c.cmd
	}
	if eval {
		c.args[0], c.args[1] = "eval", &c.src
	} else {
		c.args[0], c.args[1] = "evalsha", &c.sha
	}
	c.cmd = redis.NewIntSliceCmd(context.Background(), c.args[:c.nargs]...)
	return c.cmd
}

// noScript reports whether err is Redis's NOSCRIPT reply.
func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// run runs c alone on client with ctx, EVAL after a NOSCRIPT.
func (c *call) run(ctx context.Context, client redis.UniversalClient) {
	cmd := c.command(false)
	_ = client.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = c.command(true)
		_ = client.Process(ctx, cmd)
	}
	c.reply, c.err = cmd.Val(), cmd.Err()
}
