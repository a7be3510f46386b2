// Package httplimit is the rate-limiting flow that every adapter runs,
// written once and free of any web framework:
//
//	skip? -> the layers that apply -> their keys -> allow list? deny list? -> costs, policies -> Limiter -> headers -> pass (paced) or respond
//
// New builds a Flow from a store and its Layers, named limits checked
// together, in one Limiter call, all or nothing (global, per user, per
// endpoint, per IP: see Layer); a single limit is a Flow of one Layer.
//
// Applications use it through an adapter (ginlimit, echolimit, chilimit,
// fiberlimit), which takes the Flow. An adapter for another framework
// implements Request and Response over the framework's request and
// response, and calls Flow.Serve around the rest of the chain.
//
// An allow-listed client passes without a decision and a deny-listed one
// is answered 403, both without a store call (WithAllowList,
// WithDenyList). Every request that does not proceed is answered by the
// Responder (WithResponder; DefaultResponder by default): one over its
// limit 429 with a JSON body; one refused because the store failed under
// a layer's FailClosed 503; one the flow cannot decide (no key: 400; a bad
// cost, a failing key function, a recovered panic: 500; a client that
// left: 499, and never its handler) once the ErrorHandler has heard the
// error. A store that fails open lets the request through with no
// rate-limit header. A Limiter in shadow mode (core.WithShadow) never
// denies: the flow then writes no rate-limit header unless WithHeaders
// asks for them, and never
// paces. No response ever echoes the request or an error's text.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// Request is the request an adapter hands to Serve: what key, skip and
// cost functions read, and whether a route serves it.
type Request interface {
	keyfuncs.Request
	// Unrouted reports whether no route of the application serves the
	// request: Route() == "" where the framework's Route tells, or its
	// router's answer where a not-found handler has a pattern of its own
	// (Echo's RouteNotFound; Fiber's Route under Use, which is the
	// middleware's). The flow asks it, for a reputation's signals
	// (WithReputation), only once next has answered 404.
	Unrouted() bool
}

// Response is the response an adapter hands to Serve. Set sets a header
// field, replacing any value; Write sends status, Content-Type and body,
// ending the response. The flow calls Write at most once, and only for a
// request that does not proceed; the Response it hands to responders
// refuses a second Write with an error.
//
// The Request and the Response are valid only until Serve returns:
// adapters may reuse them (chi's come from pools, to spare an allocation
// a request), so a handler, key, skip or cost function must not keep
// them, nor use them from a goroutine of its own, past its call.
//
// A Response over a net/http header should also have HeaderMap()
// http.Header, returning that map (never nil): the flow then sets the
// rate-limit fields in it directly, under their canonical names, without
// a Set call each. One over a header that copies what it is set, as
// fasthttp's does, may have the byte setters headers.Writer reads. Both
// are matched by method set, and are only faster: Set alone is correct.
type Response interface {
	headers.Setter
	Write(status int, contentType string, body []byte) error
}

// ErrorHandler hears every error of the flow (WithErrorHandler). It only
// observes: the response is the flow's, or the Responder's.
type ErrorHandler func(r keyfuncs.Request, err error)

// Flow runs the rate-limiting sequence of its layers. Build it with New;
// it is immutable and safe for concurrent use.
type Flow struct {
	limiter  *core.Limiter
	layers   *layerSet  // every layer
	single   *flowLayer // the only plain layer, decided as one Check without per-layer Decisions; nil: several
	skips    []func(keyfuncs.Request) bool
	headers  headers.Config
	writer   *headers.Writer // of headers
	respond  Responder
	onError  ErrorHandler // WithErrorHandler's, or LogErrors(nil), handed store failures marked with outage
	outage   *storeOutage // the store's failures, as LogErrors logs them
	maxDelay time.Duration
	clientIP *keyfuncs.ClientIP
	allow    []access.Matcher // nil when none
	deny403  []access.Matcher // nil when none
	shadow   bool             // the limiter's shadow mode: never pace
	problems bool             // WithProblemDetails
	quota    *quotaEndpoint   // WithQuota; nil when none
	rep      *reputation.Tracker
	repBans  access.Matcher // the reputation's bans, matched by its key; nil when none
	repOwn   keyfuncs.Func  // the reputation's own Config.Key; nil when none
}

// New returns the Flow of layers over store, configured by opts, applied
// in order, with the Limiter it decides by (see Limiter): core.NewLimiter
// of the layers' policies, given the options of WithCore. Every wiring
// mistake is reported here, with an error wrapping core.ErrInvalidOption:
// a nil store, a nil option or the first option given an invalid value,
// no layer or more than 16, a layer without a name among
// several or two of one name, a bad method or route pattern, a bad policy;
// and allow or deny lists with a layer that has its own Key but no
// WithClientIP, which would leave the lists and the key disagreeing about
// who the client is.
func New(store core.Store, layers []Layer, opts ...Option) (*Flow, error) {
	if store == nil {
		return nil, invalid("New", "nil store")
	}
	var c config
	for i, opt := range opts {
		if opt == nil {
			return nil, invalid("New", fmt.Sprintf("option %d is nil", i))
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	for i, ly := range layers {
		if ly.Counts == CountSuccesses && ly.Policy.Name == "" {
			return nil, invalid("New", fmt.Sprintf("layer %d counts successes and has no name (Policy.Name): its companion is named after it", i))
		}
	}
	layers = withCompanions(layers)
	ls, err := compileLayers(layers)
	if err != nil {
		return nil, err
	}
	withReputation(&c)
	f := &Flow{
		rep:      c.rep,
		repBans:  c.repBans,
		repOwn:   repOwn(c.rep),
		layers:   ls,
		skips:    c.skips,
		headers:  c.headers,
		respond:  c.respond,
		maxDelay: c.maxDelay,
		clientIP: c.clientIP,
		allow:    c.allow,
		deny403:  c.deny403,
		problems: c.problems,
	}
	policies := make([]core.Policy, len(layers))
	for i := range layers {
		policies[i] = layers[i].Policy
	}
	if f.limiter, err = core.NewLimiter(store, policies, c.core...); err != nil {
		return nil, err
	}
	names := make([]string, len(layers))
	for i, p := range f.limiter.Policies() {
		names[i] = p.Name
	}
	if f.quota, err = newQuotaEndpoint(c.quota, c.quotaShow, names); err != nil {
		return nil, err
	}
	if ly := layers[0]; len(layers) == 1 && ly.Methods == nil && ly.Routes == nil && ly.Counts == CountAll {
		f.single = &ls.layers[0]
		f.single.name = f.limiter.Policies()[0].Name
	}
	f.shadow = f.limiter.Shadow()
	ownKey := false
	for _, ly := range layers {
		ownKey = ownKey || ly.Key != nil
	}
	if f.clientIP == nil && ownKey && (f.allow != nil || f.deny403 != nil) {
		// The lists would see the socket peer while the key function may
		// believe a proxy's header: say which address they are to match.
		return nil, invalid("New", "WithAllowList and WithDenyList with a layer's own Key need WithClientIP, "+
			"the client address under the key function's trust model (keyfuncs.NewClientIP() for the socket peer)")
	}
	if f.clientIP == nil {
		ip, err := keyfuncs.NewClientIP()
		if err != nil {
			return nil, err
		}
		f.clientIP = ip
	}
	for i := range ls.layers {
		if ls.layers[i].key == nil {
			ls.layers[i].key, ls.layers[i].defaultKey = f.clientIP.Key, true
		}
	}
	if !c.headersSet && !f.shadow {
		f.headers = headers.Default()
	}
	f.writer = headers.NewWriter(f.headers)
	if f.respond == nil {
		f.respond = DefaultResponder
	}
	onError := c.onError
	if onError == nil {
		onError = LogErrors(nil)
	}
	f.outage = newStoreOutage(time.Now())
	f.onError = func(r keyfuncs.Request, err error) { onError(r, f.outage.mark(err)) }
	if !c.maxDelaySet {
		f.maxDelay = defaultMaxDelay
	}
	return f, nil
}

// Limiter returns the Limiter the Flow decides by, which New built: to
// Reset a client (Limiter.Reset, of one layer or all; a login layer that
// counts only failures, Layer.Counts, needs none after a good login), or
// to share the limits with code that is not HTTP.
func (f *Flow) Limiter() *core.Limiter { return f.limiter }

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
//   - otherwise ctx carries what Report, ReportCost and reputation.Report
//     reach from the handler: make it the handler's request context
//     (net/http: r.WithContext(ctx); Fiber: the user context), run the
//     chain, and return the status written, or the one the framework will
//     write for an error the handler returned (0 if it cannot tell: read
//     as 200). The flow then settles the layers that count by the
//     response (Layer.Counts) and scores it (WithReputation).
func (f *Flow) Serve(r Request, w Response, next func(ctx context.Context) (status int)) bool {
	var st state
	proceed, s := f.handle(r, w, &st)
	if !proceed {
		return false
	}
	if s == nil && f.rep == nil {
		next(r.Context())
		return true
	}
	ctx := r.Context()
	if s != nil {
		ctx = context.WithValue(ctx, settleKey{}, s)
	}
	repKey := st.repKey // the address's, when the flow matched the reputation's bans
	if f.rep != nil {
		if repKey == "" {
			repKey = f.repAddr(r)
		}
		// reputation.Report counts against the Tracker's own key, the
		// handler's to vouch for; the response's signals, the address.
		if own := f.repOwnKey(r); own != "" {
			ctx = f.rep.NewContext(ctx, own)
		} else if repKey != "" {
			ctx = f.rep.NewContext(ctx, repKey)
		}
	}
	if ctx == r.Context() {
		next(ctx)
		return true
	}
	status := 0
	defer func() { // on a panic too
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

// handle is the flow before next, in st, and returns the settlement of a request that
// proceeds admitted by layers that settle.
func (f *Flow) handle(r keyfuncs.Request, w Response, st *state) (proceed bool, s *settlement) {
	defer func() {
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
	if f.single == nil {
		return f.handleLayers(st, r, w)
	}
	st.in = inKey
	key, err := f.single.key(r)
	if err == nil && key == "" {
		err = errEmptyKey
	}
	if f.allow != nil || f.deny403 != nil {
		k := key
		if err != nil {
			k = ""
		}
		switch l, e := f.check(st, r, k); l {
		case allowListed:
			f.report(k, l)
			return f.proceed(st, r.Context(), r, w), nil
		case denyListed:
			f.report(k, l)
			f.forbid(st, r, w, e)
			return false, nil
		}
	}
	if err != nil {
		f.fail(st, r, w, err)
		return false, nil
	}
	if f.repBans != nil {
		addr := key // the client address, when it is the layer's key
		if !f.single.defaultKey {
			addr = f.repAddr(r)
		}
		if f.repBanned(st, r, w, key, addr) {
			return false, nil
		}
	}
	cost := int64(1)
	if f.single.cost != nil {
		st.in = inCost
		cost = f.single.cost(r)
	}
	st.in = inLimiter
	ctx := r.Context()
	checks := [1]core.Check{{Key: key, Cost: cost}}
	d, at, err := f.limiter.AllowLayers(ctx, time.Time{}, checks[:], nil)
	if err != nil {
		f.fail(st, r, w, err) // bad input, or the client left: no decision
		return false, nil
	}
	return f.decided(st, ctx, r, w, &d, nil, at), nil
}

// errEmptyKey is the error of a key function that returned an empty key.
var errEmptyKey = fmt.Errorf("%w: the key function returned an empty key", keyfuncs.ErrNoKey)

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
			w.Set("Retry-After", itoa(headers.RetryAfterSeconds(*d)))
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

// fieldsOf returns where the rate-limit fields of w go: its net/http
// header map when it has one (HeaderMap), in which headers.Writer sets
// them under their canonical names ("X-Ratelimit-Remaining"), so that
// Header().Get finds them in a handler and on an httptest recorder; w
// itself otherwise.
func fieldsOf(w Response) headers.Setter {
	if m, ok := w.(interface{ HeaderMap() http.Header }); ok {
		return m.HeaderMap()
	}
	return w
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
