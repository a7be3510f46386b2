package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Take implements core.Store.Take: it decides reqs, all or nothing, and
// records them when every one is allowed. A zero now is Redis TIME; keys
// written at an explicit now live at least a minute. It returns the time
// decided at, to the microsecond, with no monotonic reading.
//
// Input that breaks the core.Store contract fails without a round trip,
// wrapping core.ErrInvalidOption; a Redis failure wraps the client's
// error. Take returns within the Store's timeout (WithTimeout, or ctx's
// deadline if earlier) or when ctx ends (a lone decision run on the
// caller's goroutine ends by its deadline instead), wrapping the
// context's error; a command already sent is not aborted.
//
// Over a Redis Cluster or a Ring, requests whose keys are in several
// slots are checked in every slot before any takes: still all or nothing,
// but an admission costs two round trips, and under contention a request
// that would have fitted may be denied (see docs/layers.md).
func (s *Store) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	// One request is one script run, one atomic step in Redis; several
	// are the layered script's (takeAll), or, over a client that spreads
	// keys (a *redis.ClusterClient by slot, a *redis.Ring by client key),
	// one script per group in two steps (takeGroups). A call whose
	// requests share one client key, or one slot, is one step again.
	//
	// Over a *redis.Client the script runs on one of the Store's flusher
	// goroutines, which sends the decisions that arrive while the others
	// are busy as one pipeline (a lone decision goes out at once, as one
	// EVALSHA); a decision asked while no other is under way, with at
	// most a second to its deadline, runs on the caller's goroutine over
	// the Store's own client instead (see the package documentation). A
	// decision whose deadline passes before a flusher reaches it is never
	// sent. Over any other client the call runs with the deadline as its
	// context's, on a goroutine of its own that Take stops waiting for,
	// unless the client honours context deadlines (see bounded).
	return s.takeBy(ctx, now, reqs, out, s.deadline(ctx))
}

// takeBy is Take, returning by deadline.
func (s *Store) takeBy(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) (time.Time, error) {
	if err := checkCalls(reqs, len(out)); err != nil {
		return time.Time{}, err
	}
	var at int64
	var err error
	if len(reqs) == 1 {
		out[0], at, err = s.takeUntil(ctx, now, reqs[0], deadline)
	} else {
		at, err = s.takeAllUntil(ctx, now, reqs, out, deadline)
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(at), nil
}

// checkCalls refuses what no method of the Store takes: requests of a
// cost below 1 (the Store itself encodes a peek as a cost of 0 and a
// refund as a cost below 0), lengths out of range. check, further on,
// refuses the rest.
func checkCalls(reqs []core.Request, decisions int) error {
	if len(reqs) < 1 || len(reqs) > limits.MaxLayers || decisions != len(reqs) {
		return fmt.Errorf("%w: redisstore: %d requests, %d decisions: want 1 to %d of each", core.ErrInvalidOption, len(reqs), decisions, limits.MaxLayers)
	}
	for i := range reqs {
		if reqs[i].Cost < 1 {
			return fmt.Errorf("redisstore: request %d: %w", i, reqs[i].Validate())
		}
	}
	return nil
}

// check is core.Request.Validate of r as the Store encodes it inside: a
// cost of 0 is a peek, checked as a cost of 1, and one below 0 a refund
// of -Cost.
func check(r *core.Request) error {
	if r.Cost >= 1 {
		return r.Validate()
	}
	q := *r
	q.Cost = max(1, -q.Cost) // -math.MinInt64 stays below 1: refused
	return q.Validate()
}

// takeUntil is Take, returning by deadline, with the time decided at in
// µs since the Unix epoch.
func (s *Store) takeUntil(ctx context.Context, at time.Time, req core.Request, deadline time.Time) (core.Decision, int64, error) {
	if s.batch != nil {
		return s.take(ctx, at, req, deadline)
	}
	// The call may go on after bounded stops waiting for it: it writes
	// its decision where only it writes, read only once it has answered
	// (err == nil), never into a variable the caller returns regardless.
	type result struct {
		d   core.Decision
		now int64
	}
	res := new(result)
	err := s.bounded(ctx, deadline, func(sctx context.Context) (err error) {
		res.d, res.now, err = s.take(sctx, at, req, time.Time{})
		return err
	})
	if err != nil {
		return core.Decision{}, 0, err
	}
	return res.d, res.now, nil
}

// take is Take, through the batcher when deadline is set, with the time
// decided at in µs since the Unix epoch: the script's, so that a Take at
// Redis TIME and one at an explicit time return alike a time with no
// monotonic reading.
func (s *Store) take(ctx context.Context, at time.Time, req core.Request, deadline time.Time) (core.Decision, int64, error) {
	if err := check(&req); err != nil {
		return core.Decision{}, 0, err
	}
	if req.Cost < 0 {
		return s.giveBackOne(ctx, at, &req, deadline)
	}
	p := req.Policy
	i := algo(p.Algorithm)
	key := s.key(req.Key, p, i)
	// ARGV: limit, window µs, capacity, cost, now µs ("" for Redis TIME),
	// minimum TTL ms, and for a lockout its three durations in µs. The
	// client writes integers without formatting them into strings first.
	var now, minTTL int64
	explicit := !at.IsZero()
	if explicit {
		now, minTTL = at.UnixMicro(), s.explicitMinTTL.Milliseconds()
	}
	capacity := limits.Capacity(p.Algorithm, p.Limit, p.Burst)
	c := callPool.Get().(*call)
	locked := p.Lockout > 0
	what, want := string(p.Algorithm), 6
	if locked {
		what, want = what+" with lockout", 7
		c.prepare(s.locked[i], s.lockedSrc[i], key, lockKey(key), explicit,
			p.Limit, p.Window.Microseconds(), capacity, req.Cost, now, minTTL,
			p.Lockout.Microseconds(), limits.LockoutCap(p.Lockout, p.LockoutMax).Microseconds(),
			limits.LockoutMemory(p.Lockout, p.LockoutMax, p.LockoutMemory).Microseconds())
	} else {
		c.prepare(s.scripts[i], s.src[i], key, "", explicit,
			p.Limit, p.Window.Microseconds(), capacity, req.Cost, now, minTTL)
	}
	var err error
	if deadline.IsZero() || s.batch == nil {
		c.run(ctx, s.client)
	} else {
		c.deadline, c.parent = deadline, ctx
		var owned bool
		if owned, err = s.batch.do(ctx, c); !owned {
			return core.Decision{}, 0, fmt.Errorf("redisstore: %s: %w", what, err)
		}
	}
	r := c.reply
	if err == nil {
		err = c.err
	}
	c.key, c.lock, c.reply, c.cmd, c.err, c.parent = "", "", nil, nil, nil, nil
	if !c.burnt {
		callPool.Put(c)
	}
	if err != nil {
		s.recovery.failed(err)
		return core.Decision{}, 0, fmt.Errorf("redisstore: %s: %w", what, err)
	}
	if len(r) != want {
		return core.Decision{}, 0, fmt.Errorf("redisstore: %s: script returned %d values, want %d", what, len(r), want)
	}
	d := decision(r, capacity)
	d.LockedOut = locked && r[6] == 1
	return d, r[5], nil
}

// lockKey returns the key of the lockout beside the state key key: the
// same hash tag, so the same Redis Cluster slot.
func lockKey(key string) string { return key + ":lock" }

// decision is the Decision of a script's reply r, of at least 5 values
// (the sixth, the time decided at, is the caller's).
func decision(r []int64, capacity int64) core.Decision {
	return core.Decision{
		Allowed:    r[0] == 1,
		Limit:      capacity,
		Remaining:  r[1],
		ResetAfter: time.Duration(r[2]) * time.Millisecond,
		RetryAfter: time.Duration(r[3]) * time.Millisecond,
		Delay:      time.Duration(r[4]) * time.Millisecond,
	}
}
