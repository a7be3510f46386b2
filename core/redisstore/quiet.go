package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Peek tells where the clients of reqs stand without spending (see
// core.Store): the scripts of Take, asked for a cost of 0, decide each
// request as one of cost 1 would be and write nothing. Over a
// *redis.Client, several requests are one script run; over a cluster
// client, one per slot, all sent at once: a single round trip, since
// nothing written needs checking or undoing. It fails on the input Take
// refuses, and is bounded as Take is.
func (s *Store) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	return s.peekBy(ctx, now, reqs, out, s.deadline(ctx))
}

// peekBy is Peek, returning by deadline.
func (s *Store) peekBy(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) error {
	if err := checkCalls(reqs, len(out)); err != nil {
		return err
	}
	arr, own := encoded(reqs, false)
	defer release(arr, own)
	var err error
	if len(own) == 1 {
		out[0], _, err = s.takeUntil(ctx, now, own[0], deadline)
	} else {
		_, err = s.takeAllUntil(ctx, now, own, out, deadline)
	}
	return err
}

// Refund gives back the Cost of each request of reqs to what the
// admission that Take returned at for was counted in, if it still is
// there (see core.Store), by give_back.lua: one run over every key over a
// *redis.Client, one per slot over a cluster client, all sent at once,
// with no check and no undo. It fails on the input Take refuses and on a
// zero at, and is bounded as Take is.
func (s *Store) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	return s.refundBy(ctx, at, reqs, s.deadline(ctx))
}

// refundBy is Refund, returning by deadline.
func (s *Store) refundBy(ctx context.Context, at time.Time, reqs []core.Request, deadline time.Time) error {
	if err := checkCalls(reqs, len(reqs)); err != nil {
		return err
	}
	arr, own := encoded(reqs, true)
	defer release(arr, own)
	if len(own) == 1 {
		_, _, err := s.takeUntil(ctx, at, own[0], deadline)
		return err
	}
	ds := decisionPool.Get().(*[limits.MaxLayers]core.Decision)
	defer decisionPool.Put(ds)
	_, err := s.takeAllUntil(ctx, at, own, ds[:len(own)], deadline)
	return err
}

// The arrays of the requests Peek and Refund encode, and of the decisions
// a Refund drops.
var (
	requestPool  = sync.Pool{New: func() any { return new([limits.MaxLayers]core.Request) }}
	decisionPool = sync.Pool{New: func() any { return new([limits.MaxLayers]core.Decision) }}
)

// encoded returns copies of reqs, in an array of requestPool, each cost
// changed as check encodes a peek (0) or, when refund is set, a refund
// (-Cost). The copies must not reach a goroutine that outlives the call
// (takeAllBounded copies them again for one).
func encoded(reqs []core.Request, refund bool) (*[limits.MaxLayers]core.Request, []core.Request) {
	arr := requestPool.Get().(*[limits.MaxLayers]core.Request)
	own := arr[:copy(arr[:], reqs)]
	for i := range own {
		if refund {
			own[i].Cost = -own[i].Cost
		} else {
			own[i].Cost = 0
		}
	}
	return arr, own
}

// release gives arr, whose requests own are, back to requestPool.
func release(arr *[limits.MaxLayers]core.Request, own []core.Request) {
	clear(own)
	requestPool.Put(arr)
}
