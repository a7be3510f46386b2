package httplimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Counts says which of the requests it admits a layer counts, by how they
// ended ([Layer.Counts]). A layer that counts by the response reserves a
// request's Cost when it admits it and, once the handler is done, gives
// back (core.Limiter.Refund) what the response says should not count, in
// one store call for all the layers of the request. A request in flight
// so holds its units, and the limit holds under concurrency, across app
// servers. A request that does not settle (a crashed server, a failed
// refund) stays counted until its window passes.
//
// A request failed when its handler said so with [Report], else by the
// layer's IsFailure of its status; a handler that panics failed. A client
// that leaves changes nothing, and a request admitted but never run is
// given back whole: docs/settling.md tells what counts when things go wrong.
type Counts uint8

const (
	// CountAll counts every admitted request, whatever its response: the
	// zero value.
	CountAll Counts = iota
	// CountFailures counts only the requests that fail: the login
	// limit that five wrong passwords reach and good logins never
	// touch, with no Limiter.Reset to call. With the policy's Lockout,
	// the request after the Limit-th failure starts the lockout.
	CountFailures
	// CountSuccesses counts only the requests that succeed. So that
	// failing at will is no way around it, the layer comes with a
	// companion, a CountFailures layer of the same policy, key, methods,
	// routes and cost, named Name+".failures": a client gets at most
	// Limit successes and at most Limit failures a window. A request is
	// admitted before its outcome is known, so it needs room in both: a
	// client whose failures are used up is refused (429) every request,
	// good ones too, until the companion's window frees room. The
	// companion is a layer of the Flow like any other (it is listed by
	// Limiter.Policies, the headers and the quota endpoint), and counts
	// toward the 16 layers.
	CountSuccesses
	// CountReported counts what the handler says the request cost, by
	// ReportCost (rows exported; tokens, from an upstream's
	// X-Tokens-Used). The layer's Cost is the reserve, the most a request
	// may cost (a model's max_tokens), and must be set; what the handler
	// reports below it is given back. A request that reports more is
	// charged the reserve alone, and the ErrorHandler hears of it: units
	// past the reserve were never admitted, and charging them after the
	// fact would let a request exceed the limit. One that reports
	// nothing is charged the reserve.
	CountReported
)

// countsName returns "all", "failures", "successes" or "reported", for
// errors.
func countsName(c Counts) string {
	switch c {
	case CountAll:
		return "all"
	case CountFailures:
		return "failures"
	case CountSuccesses:
		return "successes"
	case CountReported:
		return "reported"
	}
	return "Counts(" + strconv.Itoa(int(c)) + ")"
}

// companionSuffix names a CountSuccesses layer's companion.
const companionSuffix = ".failures"

// settleKey is the context key of a request's settlement.
type settleKey struct{}

// settlement is what a request admitted by layers that settle needs once
// its handler is done: the key and cost of each of those layers, the time
// the store admitted them at, and what the handler reported.
type settlement struct {
	at       time.Time
	n        int                    // the layers of the flow
	parts    [limits.MaxLayers]part // by layer; no key: the layer does not settle
	reported atomic.Int32           // 0: nothing; 1: success; 2: failure
	cost     atomic.Int64           // ReportCost's, plus one; 0: none
	settled  bool
}

// Report tells the layers that count by the response how the request
// ended, from its handler, through the request's context (ginlimit:
// c.Request.Context(); echolimit: c.Request().Context(); chilimit:
// r.Context(); fiberlimit: c.UserContext()): failed says it failed
// whatever its status says, and !failed that it succeeded. The last call
// wins. It does nothing on a context no settling layer admitted.
func Report(ctx context.Context, failed bool) {
	if s, ok := ctx.Value(settleKey{}).(*settlement); ok {
		v := int32(1)
		if failed {
			v = 2
		}
		s.reported.Store(v)
	}
}

// ReportCost tells the CountReported layers of the request what it cost,
// from its handler, through the request's context (see Report): rows
// exported, tokens generated. The last call wins. A negative cost counts
// as none reported. It does nothing on a context no settling layer
// admitted.
func ReportCost(ctx context.Context, cost int64) {
	if s, ok := ctx.Value(settleKey{}).(*settlement); ok && cost >= 0 && cost < 1<<62 {
		s.cost.Store(cost + 1)
	}
}

// part is what a layer that settles took of a request: its key and cost.
type part struct {
	key  string
	cost int64
}

// newSettlement returns the settlement of the layers of reqs (one Request
// per layer, no Key for a layer that did not apply) that settle, for a
// request decided d, admitted by the store at at; or nil when none
// settles or nothing was taken from the store.
func (f *Flow) newSettlement(d *core.Decision, at time.Time, reqs []core.Request) *settlement {
	if !d.Allowed || d.Shadowed || d.Source != core.SourceStore || at.IsZero() {
		return nil // nothing taken: shadowed (denied), or not the store's
	}
	var s *settlement
	for i := range reqs {
		if reqs[i].Key == "" || f.layers.layers[i].counts == CountAll {
			continue
		}
		if s == nil {
			s = &settlement{at: at, n: len(reqs)}
		}
		s.parts[i] = part{reqs[i].Key, reqs[i].Cost}
	}
	return s
}

// settle gives back what the response of a request admitted with s says
// should not count; status 0 is a handler that panicked. A failure is the
// ErrorHandler's to hear; the units then stay counted.
func (f *Flow) settle(r keyfuncs.Request, s *settlement, status int) {
	if s.settled {
		return
	}
	s.settled = true
	var back [limits.MaxLayers]core.Request // by layer; no Key: nothing given back
	n := 0
	var problems []error
	for i := range s.parts[:s.n] {
		c := s.parts[i]
		if c.key == "" {
			continue
		}
		ly := &f.layers.layers[i]
		give := int64(0)
		switch ly.counts {
		case CountFailures, CountSuccesses:
			failed, err := s.failed(ly, status)
			if err != nil {
				problems = append(problems, fmt.Errorf("layer %q: %w", ly.name, err))
				continue // counted: an outcome it cannot tell
			}
			if failed != (ly.counts == CountFailures) {
				give = c.cost
			}
		case CountReported:
			cost, err := s.reportedCost(status, c.cost)
			switch {
			case err != nil:
				problems = append(problems, fmt.Errorf("layer %q: %w", ly.name, err))
			case cost > c.cost:
				problems = append(problems, fmt.Errorf("layer %q: the handler reported a cost of %d, above the reserve of %d: charged %d", ly.name, cost, c.cost, c.cost))
			default:
				give = c.cost - cost
			}
		}
		if give > 0 {
			back[i] = core.Request{Key: c.key, Cost: give}
			n++
		}
	}
	if n > 0 {
		ctx := context.WithoutCancel(r.Context()) // the refund outlives a client that left
		if err := f.limiter.Refund(ctx, s.at, back[:s.n]); err != nil {
			problems = append(problems, fmt.Errorf("httplimit: settling the response: %w", err))
		}
	}
	if problems != nil {
		try(func() { f.onError(r, errors.Join(problems...)) })
	}
}

// refundAll gives back every settling layer's units of a request that was
// admitted but never reached its handler.
func (f *Flow) refundAll(r keyfuncs.Request, s *settlement) {
	s.settled = true
	var back [limits.MaxLayers]core.Request
	for i, c := range s.parts[:s.n] {
		back[i] = core.Request{Key: c.key, Cost: c.cost}
	}
	if err := f.limiter.Refund(context.WithoutCancel(r.Context()), s.at, back[:s.n]); err != nil {
		try(func() {
			f.onError(r, fmt.Errorf("httplimit: giving back a request that never reached its handler: %w", err))
		})
	}
}

// failed reports whether the request failed, for ly: as its handler
// reported, or as a panic (status 0), or by ly's IsFailure of status.
func (s *settlement) failed(ly *flowLayer, status int) (failed bool, err error) {
	switch s.reported.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	if status == 0 {
		return true, nil
	}
	if ly.isFailure == nil {
		return status >= 400, nil
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("IsFailure panicked: %v", v)
		}
	}()
	return ly.isFailure(status), nil
}

// reportedCost is the cost the handler reported (ReportCost); the
// reserve when a handler that panicked reported none.
func (s *settlement) reportedCost(status int, reserve int64) (int64, error) {
	if c := s.cost.Load(); c > 0 {
		return c - 1, nil
	}
	if status == 0 {
		return reserve, nil
	}
	return 0, errNoCost
}

// errNoCost is the error of a CountReported response that reported no
// cost: it is charged its reserve.
var errNoCost = errors.New("the handler reported no cost (ReportCost): charged the reserve")

// allowSettling is AllowLayers for a request with layers that settle: it
// returns the time the store admitted them at, which dates their refunds.
func (f *Flow) allowSettling(ctx context.Context, reqs []core.Request, ds []core.Decision) (core.Decision, time.Time, error) {
	return f.limiter.AllowLayers(ctx, time.Time{}, reqs, ds)
}
