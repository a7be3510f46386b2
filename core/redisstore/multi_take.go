package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// takeAll runs on the caller's goroutine and honours ctx as the client
// does (a go-redis client built with ContextTimeoutEnabled stops at its
// deadline; any client stops at its own timeouts); takeAllUntil bounds it. It
// returns the time decided at, in µs (0 when reqs is empty).
func (s *Store) takeAll(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision) (int64, error) {
	if done, err := startLayers(ctx, reqs, out); done {
		return 0, err
	}
	var slotOf func(string) int
	switch s.client.(type) {
	case *redis.ClusterClient:
		slotOf = func(key string) int { return int(slot(key)) }
	case *redis.Ring:
	default:
		if reqs[0].Cost < 0 {
			return s.giveBackAll(ctx, at, reqs, out, time.Time{})
		}
		return s.takeOne(ctx, at, reqs, out)
	}
	if reqs[0].Cost < 0 {
		return s.giveBackGroups(ctx, at, reqs, out, slotOf)
	}
	return s.takeGroups(ctx, at, reqs, out, slotOf)
}

// checkLayers reports invalid input to takeAllUntil.
func checkLayers(reqs []core.Request, out []core.Decision) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("%w: redisstore: %d decisions for %d requests", core.ErrInvalidOption, len(out), len(reqs))
	}
	if len(reqs) > limits.MaxLayers {
		return fmt.Errorf("%w: redisstore: %d requests, more than %d", core.ErrInvalidOption, len(reqs), limits.MaxLayers)
	}
	for j := range reqs {
		if err := check(&reqs[j]); err != nil {
			return fmt.Errorf("redisstore: request %d: %w", j, err)
		}
		if (reqs[j].Cost == 0) != (reqs[0].Cost == 0) {
			return fmt.Errorf("%w: redisstore: requests 0 and %d: a peek (cost 0) with a request that is not; all or none must be peeks",
				core.ErrInvalidOption, j)
		}
		if (reqs[j].Cost < 0) != (reqs[0].Cost < 0) {
			return fmt.Errorf("%w: redisstore: requests 0 and %d: a give-back (cost below 0) with a request that is not; all or none must be give-backs",
				core.ErrInvalidOption, j)
		}
		name := policyName(&reqs[j].Policy)
		for k := range j {
			if reqs[k].Key == reqs[j].Key && policyName(&reqs[k].Policy) == name {
				return fmt.Errorf("%w: redisstore: requests %d and %d have key %q and policy %q", core.ErrInvalidOption, k, j, reqs[j].Key, name)
			}
		}
	}
	return nil
}

// policyName is the name p's keys carry.
func policyName(p *core.Policy) string {
	if p.Name != "" {
		return p.Name
	}
	return limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)
}

// takeOne decides reqs with one script run, and returns the time decided
// at (µs).
func (s *Store) takeOne(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision) (int64, error) {
	c := multiPool.Get().(*multiCall)
	defer c.put()
	if err := s.prepare(c, at, reqs, modeTake); err != nil {
		return 0, err
	}
	r, err := s.process(ctx, c)
	if err != nil {
		s.recovery.failed(err)
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	if len(r) != c.want {
		return 0, fmt.Errorf("redisstore: layers: script returned %d values, want %d", len(r), c.want)
	}
	return c.decisions(r, out), nil
}

// process runs c's script with ctx on the Store's client, EVAL after a
// NOSCRIPT, and returns its reply.
func (s *Store) process(ctx context.Context, c *multiCall) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, c.command(false)...)
	_ = s.client.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = redis.NewIntSliceCmd(ctx, c.command(true)...)
		_ = s.client.Process(ctx, cmd)
	}
	return cmd.Val(), cmd.Err()
}

// takeAllUntil is Take of several requests (or, as check encodes them,
// peeks or refunds), returning by deadline, with the time decided at in µs
// (0 when reqs is empty). Over a *redis.Client, the layered script runs on
// one of the Store's flusher goroutines, in the pipeline of the decisions
// that arrive while the others are busy; over any other client, as
// takeAll, with the deadline as its context's, on a goroutine of its own
// unless the client honours context deadlines.
func (s *Store) takeAllUntil(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) (int64, error) {
	if s.batch == nil {
		return s.takeAllBounded(ctx, at, reqs, out, deadline)
	}
	if done, err := startLayers(ctx, reqs, out); done {
		return 0, err
	}
	if reqs[0].Cost < 0 {
		return s.giveBackAll(ctx, at, reqs, out, deadline)
	}
	m := multiPool.Get().(*multiCall)
	if err := s.prepare(m, at, reqs, modeTake); err != nil {
		m.put()
		return 0, err
	}
	r, owned, err := s.batched(ctx, m, deadline)
	if !owned {
		// The flusher may still send m's arguments: m does not go back
		// to its pool.
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	defer m.put()
	if err != nil {
		s.recovery.failed(err)
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	if len(r) != m.want {
		return 0, fmt.Errorf("redisstore: layers: script returned %d values, want %d", len(r), m.want)
	}
	return m.decisions(r, out), nil
}

// batched runs m's script through the batcher, by deadline, and returns
// its reply. It returns owned false, with the error of the wait, when it
// stopped waiting after the call was queued: m then belongs to the
// flusher, which may still send its arguments, and must not go back to
// its pool.
func (s *Store) batched(ctx context.Context, m *multiCall, deadline time.Time) (_ []int64, owned bool, _ error) {
	c := callPool.Get().(*call)
	c.reset(m)
	c.deadline, c.parent = deadline, ctx
	owned, err := s.batch.do(ctx, c)
	if !owned {
		return nil, false, err
	}
	r := c.reply
	if err == nil {
		err = c.err
	}
	c.reply, c.cmd, c.err, c.parent, c.multi = nil, nil, nil, nil, nil
	if !c.burnt {
		callPool.Put(c)
	}
	return r, true, err
}

// takeAllBounded is takeAllUntil over a client without a batcher: takeAll,
// bounded (see bounded), into copies of its own of reqs and out, which are
// the caller's again once it has returned.
func (s *Store) takeAllBounded(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) (int64, error) {
	if len(reqs) > limits.MaxLayers || len(out) != len(reqs) {
		return 0, checkLayers(reqs, out)
	}
	// The call may go on after bounded stops waiting for it: it writes
	// the time where only it writes, read only once it has answered.
	now := new(int64)
	if s.honoursDeadline() {
		err := s.bounded(ctx, deadline, func(sctx context.Context) (err error) {
			*now, err = s.takeAll(sctx, at, reqs, out)
			return err
		})
		if err != nil {
			return 0, err
		}
		return *now, nil
	}
	own := make([]core.Request, len(reqs))
	copy(own, reqs)
	ds := new([limits.MaxLayers]core.Decision)
	done := new(atomic.Bool) // set once the call has returned: ds is then ours to read
	err := s.bounded(ctx, deadline, func(sctx context.Context) (err error) {
		*now, err = s.takeAll(sctx, at, own, ds[:len(own)])
		done.Store(true)
		return err
	})
	if err != nil {
		if done.Load() { // the requests whose master failed (see failedOn)
			for i := range out {
				out[i].Err = ds[i].Err
			}
		}
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	copy(out, ds[:len(out)])
	return *now, nil
}

// startLayers checks a layered call's requests, decisions and context
// before it starts: done is true when there is nothing to do (no request)
// or it cannot start, with the error.
func startLayers(ctx context.Context, reqs []core.Request, out []core.Decision) (done bool, err error) {
	if err := checkLayers(reqs, out); err != nil {
		return true, err
	}
	if len(reqs) == 0 {
		return true, nil
	}
	if err := ctx.Err(); err != nil {
		return true, fmt.Errorf("redisstore: layers: %w", err)
	}
	return false, nil
}
