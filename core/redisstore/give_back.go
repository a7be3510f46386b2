package redisstore

// Give-backs (core.Request.Cost below 0): one run of give_back.lua per
// Redis (per slot on a Redis Cluster), never a check, never an undo.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// giveBackLua gives back what admissions took (see give_back.lua). A
// script of its own rather than a branch of the algorithms' scripts, so
// that a take's script, the hot path, is the one it was: not a byte more
// to parse, not a comparison more to run; and a give-back needs neither
// the prelude nor the lockout's wrapper, whose keys it never touches.
// One script for every algorithm, taking any number of keys, so that a
// Refund of several requests is one run on one Redis, and one per slot on a
// Cluster.
//
//go:embed give_back.lua
var giveBackLua string

var giveBackScript = redis.NewScript(giveBackLua)

// errGiveBackTime refuses a give-back without the time of its admission.
var errGiveBackTime = errors.New("a refund needs the time Take returned for its admission")

// prepareGiveBack fills c's arguments for the give-backs reqs (valid,
// every cost below 0) of admissions made at now (µs).
func (s *Store) prepareGiveBack(c *multiCall, now int64, reqs []core.Request) {
	c.n = len(reqs)
	c.sha, c.src, c.want = giveBackScript.Hash(), giveBackLua, 1
	c.args[0], c.args[1], c.args[2] = "evalsha", &c.sha, int64(len(reqs)) // below 256: boxed without allocating
	n := 3
	for j := range reqs {
		p := &reqs[j].Policy
		i := algo(p.Algorithm)
		c.algo[j], c.locked[j], c.capacity[j] = i, false, limits.Capacity(p.Algorithm, p.Limit, p.Burst)
		c.keys[j] = s.key(reqs[j].Key, *p, i)
		c.args[n] = &c.keys[j]
		n++
	}
	for j := range reqs {
		p := &reqs[j].Policy
		ints := [...]int64{int64(c.algo[j]), p.Limit, p.Window.Microseconds(), -reqs[j].Cost, now}
		b := packLayer(c.packed[j][:0], ints[:], true)
		// unsafe: as in prepare, the packed numbers are the argument: 9
		// against 13 allocs/op for four keys, CPU the same (38 CPU-µs/op,
		// client and server; go test -run '^$' -bench 'Refund/keys-4'
		// ./core/redisstore, median of 6 alternating runs, 2026-12-07).
		c.pstr[j] = unsafe.String(&b[0], len(b))
		c.args[n] = &c.pstr[j]
		n++
	}
	c.nargs = n
}

// giveBackDecisions fills out with the decisions of the give-backs of c:
// allowed, with the policy's capacity as limit, every other field zero.
func (c *multiCall) giveBackDecisions(out []core.Decision) {
	for j := range c.n {
		out[j] = core.Decision{Allowed: true, Limit: c.capacity[j]}
	}
}

// giveBackOne is Take of the give-back req (valid, its cost below 0):
// give_back.lua for its key, through the batcher when deadline is set.
func (s *Store) giveBackOne(ctx context.Context, at time.Time, req *core.Request, deadline time.Time) (core.Decision, int64, error) {
	reqs, out := [1]core.Request{*req}, [1]core.Decision{}
	now, err := s.giveBackAll(ctx, at, reqs[:], out[:], deadline)
	if err != nil {
		return core.Decision{}, 0, err
	}
	return out[0], now, nil
}

// giveBackAll gives back reqs (valid, every cost below 0) with one run of
// give_back.lua over every key, through the batcher when deadline is set
// (a *redis.Client), else on ctx; it returns now in µs.
func (s *Store) giveBackAll(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) (int64, error) {
	if at.IsZero() {
		return 0, fmt.Errorf("%w: redisstore: %w", core.ErrInvalidOption, errGiveBackTime)
	}
	m := multiPool.Get().(*multiCall)
	s.prepareGiveBack(m, at.UnixMicro(), reqs)
	var r []int64
	var err error
	if deadline.IsZero() || s.batch == nil {
		r, err = s.process(ctx, m)
	} else {
		var owned bool
		if r, owned, err = s.batched(ctx, m, deadline); !owned {
			return 0, fmt.Errorf("redisstore: give-back: %w", err)
		}
	}
	defer m.put()
	if err != nil {
		s.recovery.failed(err)
		return 0, fmt.Errorf("redisstore: give-back: %w", err)
	}
	if len(r) != m.want {
		return 0, fmt.Errorf("redisstore: give-back: script returned %d values, want %d", len(r), m.want)
	}
	m.giveBackDecisions(out)
	return r[0], nil
}

// giveBackGroups gives back reqs (valid, every cost below 0) over a client
// that spreads keys (see takeGroups): one run of give_back.lua per slot
// (per client key when slotOf is nil), all sent at once (runAtOnce). A
// give-back is never denied and needs no other's, so there is nothing to
// check first and nothing to undo: a group that fails fails the call,
// and the others' give-backs stand.
func (s *Store) giveBackGroups(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, slotOf func(string) int) (int64, error) {
	if at.IsZero() {
		return 0, fmt.Errorf("%w: redisstore: %w", core.ErrInvalidOption, errGiveBackTime)
	}
	now := at.UnixMicro()
	gs := groupBy(reqs, slotOf)
	calls := make([]*multiCall, len(gs))
	for k, g := range gs {
		c := multiPool.Get().(*multiCall)
		defer c.put()
		s.prepareGiveBack(c, now, g.reqs)
		calls[k] = c
	}
	var failed error
	for k, cmd := range runAtOnce(ctx, s.client, calls) {
		r, err := cmd.Int64Slice()
		if err == nil && len(r) != 1 {
			err = fmt.Errorf("script returned %d values, want 1", len(r))
		}
		if err != nil {
			s.recovery.failed(err)
			failed = errors.Join(failed, err)
			continue
		}
		for j, i := range gs[k].idx {
			out[i] = core.Decision{Allowed: true, Limit: calls[k].capacity[j]}
		}
	}
	if failed != nil {
		return 0, fmt.Errorf("redisstore: give-back: %w", failed)
	}
	return now, nil
}
