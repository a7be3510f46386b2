// Package httplimit is the rate-limiting flow that every adapter runs,
// written once and free of any web framework:
//
//	skip? -> the layers that apply -> their keys -> allow list? deny list? -> costs, policies -> Limiter -> headers -> pass (paced) or respond
//
// New builds a Flow from a store and its Layers, named limits checked
// together, in one Limiter call, all or nothing (global, per user, per
// endpoint, per IP: see Layer); a single limit is a Flow of one Layer, and
// PerIP(store, 100, time.Minute) the one line for the common one.
//
// Applications use it through an adapter (ginlimit, echolimit, chilimit,
// fiberlimit), which takes the Flow. An adapter for another framework
// implements keyfuncs.Request and Response over the framework's request and
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
	"fmt"
	"net/http"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

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
	layers   *layerSet // every layer
	one      bool      // one layer, on every request, counting all: its Request lives on Serve's stack
	settles  bool      // some layer counts by the response
	costly   bool      // some layer has a Cost
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
	c, err := configOf(opts)
	if err != nil {
		return nil, err
	}
	if layers, err = withCompanions(layers); err != nil {
		return nil, err
	}
	ls, err := compileLayers(layers)
	if err != nil {
		return nil, err
	}
	withReputation(c)
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
		ls.layers[i].name = p.Name // an only layer's may be its policy's DefaultName
		f.settles = f.settles || ls.layers[i].counts != CountAll
		f.costly = f.costly || ls.layers[i].cost != nil
	}
	if f.quota, err = newQuotaEndpoint(c.quota, c.quotaShow, names); err != nil {
		return nil, err
	}
	f.one = len(layers) == 1 && !ls.needsPath && ls.layers[0].methods == nil && !f.settles
	f.shadow = f.limiter.Shadow()
	if err := f.keyClients(c, layers); err != nil {
		return nil, err
	}
	f.complete(c)
	return f, nil
}

// configOf applies opts, in order, to the zero config.
func configOf(opts []Option) (*config, error) {
	c := new(config)
	for i, opt := range opts {
		if opt == nil {
			return nil, invalid("New", fmt.Sprintf("option %d is nil", i))
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// keyClients sets who the client is, by address (WithClientIP's, or the
// socket peer), and keys by it every layer without a Key of its own.
func (f *Flow) keyClients(c *config, layers []Layer) error {
	ownKey := false
	for _, ly := range layers {
		ownKey = ownKey || ly.Key != nil
	}
	if f.clientIP == nil && ownKey && (f.allow != nil || f.deny403 != nil) {
		// The lists would see the socket peer while the key function may
		// believe a proxy's header: say which address they are to match.
		return invalid("New", "WithAllowList and WithDenyList with a layer's own Key need WithClientIP, "+
			"the client address under the key function's trust model (keyfuncs.NewClientIP() for the socket peer)")
	}
	if f.clientIP == nil {
		ip, err := keyfuncs.NewClientIP()
		if err != nil {
			return err
		}
		f.clientIP = ip
	}
	for i := range f.layers.layers {
		if ly := &f.layers.layers[i]; ly.key == nil {
			ly.key, ly.defaultKey = f.clientIP.Key, true
		}
	}
	return nil
}

// complete gives f the defaults of what c leaves unset: the headers, the
// Responder, the ErrorHandler (told of the store's outages) and the
// longest pacing.
func (f *Flow) complete(c *config) {
	if !c.headersSet && !f.shadow {
		f.headers = headers.Config{XRateLimit: true, Draft6: true, RetryAfter: true}
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
}

// Limiter returns the Limiter the Flow decides by, which New built: to
// Reset a client (Limiter.Reset, of one layer or all; a login layer that
// counts only failures, Layer.Counts, needs none after a good login), or
// to share the limits with code that is not HTTP.
func (f *Flow) Limiter() *core.Limiter { return f.limiter }

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
