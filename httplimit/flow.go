package httplimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// This file is the request sequence, written once, top to bottom: Serve,
// then admit (everything before the handler), then decided (what the
// Limiter's decision makes of the request). Each concern enters it at one
// point, named where it does:
//
//	quota endpoint  admit: answered before the skips (quota.go)
//	lists           admit: after the keys, allow before deny (access.go)
//	reputation      admit: its bans, after the lists; decided and forbid: its
//	                signals; Serve: the handler's context and the response (reputation.go)
//	settling        admit: the Limiter's call reserves; Serve: settles once
//	                next returns (settle.go)
//	problem details decided and forbid: the refusal's body (problem.go)
//	panics          admit: recovered, answered 500 (panic.go)

// Serve runs the flow for one request and, if the request may proceed,
// next, the rest of the chain; it reports whether the request proceeded.
// When it returns false, the response has been written, next was not
// called, and the adapter must stop the chain. Serve never panics: a
// panic in a function given to the flow is recovered (see PanicError); a
// panic in next settles the request as failed and goes on.
//
// next runs the rest of the chain under ctx and returns the status the
// response got:
//   - when ctx is r.Context(), nothing is to be settled or scored: run the
//     chain as it is and return 0;
//   - otherwise ctx carries what Report, ReportCost and reputation.Penalize
//     reach from the handler: make it the handler's request context
//     (net/http: r.WithContext(ctx); Fiber: the user context), run the
//     chain, and return the status written, or the one the framework will
//     write for an error the handler returned (0 if it cannot tell: read
//     as 200). The flow then settles the layers that count by the
//     response (Layer.Counts) and scores it (WithReputation).
func (f *Flow) Serve(r keyfuncs.Request, w Response, next func(ctx context.Context) (status int)) bool {
	var st state
	proceed, s := f.admit(r, w, &st)
	if !proceed {
		return false
	}
	if s == nil && f.rep == nil {
		next(r.Context()) // nothing to settle or score: the handler as it is
		return true
	}
	ctx, repKey := f.handlerContext(r, &st, s)
	if ctx == r.Context() {
		next(ctx)
		return true
	}
	status := 0
	defer func() { // on a panic too (status 0)
		if s != nil {
			f.settle(r, s, status)
		}
		if repKey != "" && status != 0 {
			f.repResponse(ctx, r, repKey, status)
		}
	}()
	status = next(ctx)
	if status == 0 {
		status = 200 // a handler that wrote nothing is answered 200
	}
	return true
}

// admit runs the flow before the handler, in st: it reports whether r
// proceeds, and returns the settlement of a request admitted by layers
// that settle. A flow of one layer that applies to every request and
// counts all keeps its Request on the stack and asks the Limiter for no
// per-layer decision; other flows use a pooled scratch.
//
// admit has one defer, which the compiler open-codes: two, by admit's
// returns, would be run by the runtime (about 170 instructions a request,
// callgrind of BenchmarkEcho/LimiterUntimed).
func (f *Flow) admit(r keyfuncs.Request, w Response, st *state) (proceed bool, s *settlement) {
	var sc *scratch
	defer func() {
		if sc != nil {
			sc.release()
		}
		if v := recover(); v != nil {
			proceed, s = false, nil
			f.recovered(r, w, st, v)
		}
	}()
	if f.quota != nil && f.quota.is(r) {
		f.answerQuota(st, r, w)
		return false, nil
	}
	st.in = inSkip
	for _, skip := range f.skips {
		if skip(r) {
			return true, nil
		}
	}
	one, oneKey := [1]core.Request{}, [1]string{}
	reqs, keys := one[:], oneKey[:0]
	if !f.one {
		sc = scratches.Get().(*scratch)
		sc.n = len(f.layers.layers)
		reqs, keys = sc.reqs[:sc.n], sc.keys[:0]
	}
	st.in = inKey
	keys, keyErr := f.keyed(r, sc.matcherFor(r, f.layers), reqs, keys)
	if f.allow != nil || f.deny403 != nil {
		if done, proceed := f.listed(st, r, w, keys); done {
			return proceed, nil
		}
	}
	if keyErr != nil {
		f.fail(st, r, w, keyErr)
		return false, nil
	}
	if f.repBans != nil && f.repBanned(st, r, w, firstKey(keys), f.addrKey(r, reqs)) {
		return false, nil
	}
	if len(keys) == 0 {
		return f.proceed(st, r.Context(), r, w), nil // no layer applies
	}
	f.costs(st, r, reqs)
	st.in = inLimiter
	ctx := r.Context()
	settles := f.settles && f.anySettles(reqs)
	var ds []core.Decision // each layer's decision, when more than one tells
	if len(keys) > 1 || settles {
		ds = sc.ds[:len(reqs)]
	}
	var d core.Decision
	var at time.Time
	var err error
	if settles {
		d, at, err = f.allowSettling(ctx, reqs, ds) // reserves: settled once next returns
	} else {
		d, at, err = f.limiter.AllowLayers(ctx, time.Time{}, reqs, ds)
	}
	if err != nil {
		f.fail(st, r, w, err) // bad input, or the client left: no decision
		return false, nil
	}
	if settles {
		s = f.newSettlement(&d, at, reqs)
	}
	if len(keys) < len(ds) {
		ds = applied(reqs, ds) // the headers list the layers that applied
	}
	if !f.decided(st, ctx, r, w, &d, ds, at) {
		if s != nil {
			f.refundAll(r, s) // admitted, but the client left before its handler ran
		}
		return false, nil
	}
	return true, s
}

// keyed fills reqs, one Request per layer of f, zero, whose room admit
// chose, with the key of each layer that applies to r (its path matched
// by m, nil when no layer has Routes) and a cost of 1, and appends those
// keys to keys; err is the first key function's error, of a layer left
// out.
func (f *Flow) keyed(r keyfuncs.Request, m *matcher, reqs []core.Request, keys []string) (_ []string, err error) {
	ls := f.layers.layers
	for i := range ls {
		ly := &ls[i]
		if (ly.methods != nil || ly.routes != nil) && !ly.applies(r, m) {
			continue
		}
		key, kerr := ly.key(r)
		if kerr == nil && key == "" {
			kerr = errEmptyKey
		}
		if kerr != nil {
			if err == nil {
				err = kerr
				if len(ls) > 1 {
					err = fmt.Errorf("layer %q: %w", ly.name, kerr)
				}
			}
			continue
		}
		reqs[i].Key, reqs[i].Cost = key, 1 // reqs[i] is zero: its Policy too
		keys = append(keys, key)
	}
	return keys, err
}

// costs sets the cost of each layer of reqs that applies, by its Cost (1
// when nil).
func (f *Flow) costs(st *state, r keyfuncs.Request, reqs []core.Request) {
	if !f.costly {
		return // inlined: no call
	}
	f.setCosts(st, r, reqs)
}

// setCosts is costs for a flow whose layers have a Cost.
func (f *Flow) setCosts(st *state, r keyfuncs.Request, reqs []core.Request) {
	for i := range reqs {
		if cost := f.layers.layers[i].cost; cost != nil && reqs[i].Key != "" {
			st.in = inCost
			reqs[i].Cost = cost(r)
		}
	}
}

// applied returns the decisions of ds (one per layer) of the layers that
// applied, those of reqs with a Key, moved to its front in layer order.
func applied(reqs []core.Request, ds []core.Decision) []core.Decision {
	n := 0
	for i := range reqs {
		if reqs[i].Key != "" {
			if n != i {
				ds[n] = ds[i]
			}
			n++
		}
	}
	return ds[:n]
}

// errEmptyKey is the error of a key function that returned an empty key.
var errEmptyKey = fmt.Errorf("%w: the key function returned an empty key", keyfuncs.ErrNoKey)

// anySettles reports whether a layer of reqs that applies counts by the
// response.
func (f *Flow) anySettles(reqs []core.Request) bool {
	for i := range reqs {
		if reqs[i].Key != "" && f.layers.layers[i].counts != CountAll {
			return true
		}
	}
	return false
}

// firstKey is the first of keys, "" when there is none: the key a listed
// or banned request is reported under.
func firstKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// addrKey is the client address's key, which the reputation's bans and
// signals go by: a layer's of the default key that applies has it.
func (f *Flow) addrKey(r keyfuncs.Request, reqs []core.Request) string {
	for i := range reqs {
		if reqs[i].Key != "" && f.layers.layers[i].defaultKey {
			return reqs[i].Key
		}
	}
	return f.repAddr(r)
}

// scratch is the room of a request's parts, keys and decisions in a flow
// of several layers, pooled: the requests and the decisions would
// otherwise escape to the heap, or grow every handler goroutine's stack.
type scratch struct {
	n    int // the layers of its flow
	reqs [limits.MaxLayers]core.Request
	keys [limits.MaxLayers]string
	ds   [limits.MaxLayers]core.Decision
	m    matcher
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// matcherFor returns sc's matcher readied for r when a layer of ls has
// Routes, nil otherwise (sc is nil for a flow of one plain layer).
func (sc *scratch) matcherFor(r keyfuncs.Request, ls *layerSet) *matcher {
	if sc == nil || !ls.needsPath {
		return nil
	}
	sc.m.init(r)
	return &sc.m
}

// release clears what sc holds of its request and pools it.
func (sc *scratch) release() {
	clear(sc.reqs[:sc.n])
	clear(sc.keys[:sc.n])
	clear(sc.ds[:sc.n])
	sc.n = 0
	sc.m.reset()
	scratches.Put(sc)
}

// handlerContext returns the context the handler runs under, carrying
// the settlement s (nil when no layer settles) that Report and ReportCost
// reach and the key reputation.Penalize counts against; and the key the
// response's signals count against, the client address's ("" without a
// reputation).
func (f *Flow) handlerContext(r keyfuncs.Request, st *state, s *settlement) (ctx context.Context, repKey string) {
	ctx = r.Context()
	if s != nil {
		ctx = context.WithValue(ctx, settleKey{}, s)
	}
	repKey = st.repKey // the address's, when the flow matched the reputation's bans
	if f.rep != nil {
		if repKey == "" {
			repKey = f.repAddr(r)
		}
		// reputation.Penalize counts against the Tracker's own key, the
		// handler's to vouch for; the response's signals, the address.
		if own := f.repOwnKey(r); own != "" {
			ctx = f.rep.NewContext(ctx, own)
		} else if repKey != "" {
			ctx = f.rep.NewContext(ctx, repKey)
		}
	}
	return ctx, repKey
}

// decided tells the client about d, the binding decision of layers (nil
// for a flow of one layer), decided at the time at (zero when the Limiter
// does not say, and then read only if a field needs it), and passes
// (paced) or denies. A degraded decision (d.Err set: the store failed, or a
// policy could not be had) is first passed to the ErrorHandler; one of the
// layers' FailClosed (d.Source is core.SourceFailMode) tells the client
// nothing of its quota: it passes with no rate-limit header, or is refused
// with Retry-After alone.
func (f *Flow) decided(st *state, ctx context.Context, r keyfuncs.Request, w Response, d *core.Decision, layers []core.Decision, at time.Time) bool {
	if d.Err != nil {
		st.in = inErrorHandler
		f.onError(r, d.Err)
	} else if f.outage.down.Load() && (d.Source == core.SourceStore || d.Source == core.SourceFallback) {
		f.outage.recovered(ctx, time.Now()) // the store decided (the fallback only refused what it admitted)
	}
	if d.Source == core.SourceFailMode {
		if d.Allowed {
			return f.proceed(st, ctx, r, w) // failed open: no header, the store told nothing
		}
		if f.headers.RetryAfter {
			st.in = inHeaders
			w.Set("Retry-After", itoa(limits.RetryAfterSeconds(d.Allowed, d.RetryAfter)))
		}
		f.refuse(st, r, w, d, layers)
		return false
	}
	st.in = inHeaders
	f.writer.Write(fieldsOf(w), *d, layers, at)
	if !d.Allowed {
		if f.rep != nil {
			s := reputation.Denied
			if d.LockedOut {
				s = reputation.LockedOut
			}
			f.repSignal(st, r, s)
		}
		f.refuse(st, r, w, d, layers)
		return false
	}
	if d.Delay > 0 && f.maxDelay > 0 && !f.shadow && !pace(ctx, min(d.Delay, f.maxDelay)) {
		f.fail(st, r, w, canceled(ctx))
		return false
	}
	return f.proceed(st, ctx, r, w)
}

// proceed lets an admitted request through, unless its context has ended:
// the client is gone, and the handler must not run for it.
func (f *Flow) proceed(st *state, ctx context.Context, r keyfuncs.Request, w Response) bool {
	if ctx.Err() != nil {
		f.fail(st, r, w, canceled(ctx))
		return false
	}
	return true
}

// fail reports err and answers the request with the Responder.
func (f *Flow) fail(st *state, r keyfuncs.Request, w Response, err error) {
	st.in = inErrorHandler
	f.onError(r, err)
	st.in = inResponder
	f.respond(r, st.guard(w), core.Decision{}, err)
}

// canceled is the error of a request admitted, or paced, while its context
// ended: it wraps ctx.Err() (context.Canceled or context.DeadlineExceeded)
// and the context's cause.
func canceled(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return fmt.Errorf("httplimit: the request's context ended before its handler ran: %w", err)
	}
	return fmt.Errorf("httplimit: the request's context ended before its handler ran: %w: %w", err, cause)
}

// clientLeft reports whether err, an error of the flow that came with no
// decision for the request whose context is ctx, says that the client
// left: ctx has ended (or its deadline passed, its timer not yet fired:
// the Limiter counts that as ended too) and err wraps a context's error.
// The error alone never tells: a store's timeout, or a key function's,
// wraps context.DeadlineExceeded while the client still waits, and a
// store failure is never the client leaving.
func clientLeft(ctx context.Context, err error) bool {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) ||
		outcome.StoreErrorKind(err) != "" {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// pace waits d, or until ctx ends, and reports whether the wait completed.
func pace(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
