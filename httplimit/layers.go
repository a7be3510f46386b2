package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/internal/limits"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Layer is one named limit of a layered middleware (WithLayers): the whole
// API, a user, an endpoint, an address. Every request is checked, in one
// Limiter call, against every layer that applies to it (by Methods and
// Routes); it passes only when all of them admit it, and one denied by any
// layer takes nothing from any:
//
//	layers := []httplimit.Layer{
//		{Name: "global", Policy: perMinute(1_000_000), Key: global},
//		{Name: "user", Policy: perMinute(1000), Key: userOrIP, PolicyFor: plan,
//			Cost: httplimit.CostByRoute(map[string]int64{"GET /search": 5})},
//		{Name: "login", Policy: fivePer15Minutes, Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
//		{Name: "ip", Policy: perMinute(300), Key: ip},
//	}
//	lim, err := httplimit.NewLayered(store, layers, core.WithFailMode(core.FailOpen))
//	mw := ginlimit.New(lim, ginlimit.WithLayers(layers...))
type Layer struct {
	// Name identifies the layer: unique whatever the case ("login" and
	// "Login" are one name twice), at most 64 characters of
	// [A-Za-z0-9._-]. It names the layer's item in the
	// RateLimit and RateLimit-Policy headers, and its state in the store.
	Name string
	// Policy is the layer's policy, unless PolicyFor chooses another for a
	// request. Its Name must be empty or Name.
	Policy core.Policy
	// Key says who the client is under this layer (keyfuncs.Static for
	// one key shared by every request, keyfuncs.FirstOf(user, ip) for a
	// user falling back to its address). It is required. A key function
	// that fails fails the request, as WithKeyFunc's does.
	Key keyfuncs.Func
	// PolicyFor, when not nil, chooses the policy of a request under this
	// layer from the request and its key: a premium plan, a per-API-key
	// quota. A nil policy is the layer's Policy. The policy must have the
	// layer's Algorithm; its Name is the layer's whatever it says, so a
	// client moved from one plan to another keeps its usage. An error, or
	// an invalid policy, decides the request by the Limiter's FailMode
	// (core.FailOpen passes, core.FailClosed answers 503), and is passed
	// to the ErrorHandler; never a 500 nor a panic (a PolicyFor that
	// panics is recovered, and answered 500 like any handler's panic). It
	// runs on the request's goroutine before the store is asked, outside
	// the Limiter's timeout: keep it fast (a lookup in memory, not I/O).
	PolicyFor func(r keyfuncs.Request, key string) (*core.Policy, error)
	// Methods limits the layer to requests of these methods, compared
	// case-insensitively; a layer on GET applies to HEAD too, which most
	// routers serve with the GET handler. Empty: every method.
	Methods []string
	// Routes limits the layer to requests whose path matches one of these
	// patterns: "/login"; "/users/{id}" or "/users/:id", a parameter
	// matching one path segment; "/api/*", a suffix wildcard matching
	// "/api" and every path below it. Empty: every path. See WithLayers
	// for how a path is matched.
	Routes []string
	// Cost says how many units a request takes from this layer (1 when
	// nil), as WithCost does for a single limit; see CostByRoute.
	Cost func(keyfuncs.Request) int64
	// FailClosed makes the layer deny when the store fails, whatever the
	// Limiter's FailMode: a login guard that must not open during an
	// outage (see core.Layer.FailClosed).
	FailClosed bool
}

// PathRequest is a keyfuncs.Request that knows its path: every adapter's
// requests do. Path returns the request's path as the server received it,
// without its query, percent-decoded or not. A layer's Routes are matched
// against the normalized path of a PathRequest, and against the Route
// pattern of a request that is not one.
type PathRequest interface {
	keyfuncs.Request
	Path() string
}

// NewLayered returns the Limiter of layers over store, for WithLayers with
// the same layers: core.NewLayered with each layer's Name, Policy and
// FailClosed, the layers checked as WithLayers checks them. opts are
// core.NewLayered's. Errors wrap core.ErrInvalidOption (or
// core.ErrInvalidPolicy for a layer's policy).
func NewLayered(store core.Store, layers []Layer, opts ...core.Option) (*core.Limiter, error) {
	if _, err := compileLayers("NewLayered", layers); err != nil {
		return nil, err
	}
	cl := make([]core.Layer, len(layers))
	for i, ly := range layers {
		cl[i] = core.Layer{Name: ly.Name, Policy: ly.Policy, FailClosed: ly.FailClosed}
	}
	return core.NewLayered(store, cl, opts...)
}

// WithLayers makes the flow check every request against layers, in one
// Limiter call: the Limiter must have been built with the same layers
// (NewLayered; by name, one to one, in any order, with the same Policy and
// FailClosed). The flow then runs
//
//	skip? -> the layers that apply -> their keys -> allow list? deny list? -> costs, policies -> Limiter.AllowLayers -> headers -> pass (paced) or deny
//
// A request to which no layer applies passes untouched, with no header.
// Key entries of the allow and deny lists are matched against the key of
// every layer that applies. X-RateLimit-* and RateLimit-* describe the
// binding layer (the one that denied, or the one closest to denying: its
// Remaining is the least any layer has left); the draft-10 RateLimit and
// RateLimit-Policy fields list every layer that applied
// (headers.WriteLayers); Retry-After is the time at which every layer
// admits again. A leaky-bucket layer paces the request by the longest
// Delay of the layers.
//
// Routes are matched so that no spelling of a path slips past a layer:
// the path is percent-decoded (twice encoded too), cut at '?', '#' and
// each segment's ';', its backslashes read as slashes, its empty and "."
// segments dropped and its ".." segments resolved, its trailing slash
// ignored, and compared case-insensitively. A layer may so apply to a
// request the router would not send to its route (over-matching, which
// costs the client a unit), never miss one the router would.
//
// WithLayers fails, with an error wrapping core.ErrInvalidOption, on no
// layer, a layer without a Key, a duplicate or empty name, a bad method or
// route pattern; New fails when the Limiter's layers are not these, or
// when WithKeyFunc or WithCost is given too (each layer has its own).
func WithLayers(layers ...Layer) Option {
	return func(c *config) error {
		if _, err := compileLayers("WithLayers", layers); err != nil {
			return err
		}
		c.layers = append(c.layers, layers...)
		return nil
	}
}

// CostByRoute returns a Layer.Cost (or WithCost) function weighing requests
// by route: costs maps "METHOD /pattern", or "/pattern" for every method,
// to the cost of the requests it matches, with patterns as Layer.Routes
// takes them ("GET /search": 5, "POST /export/*": 100). The most specific
// entry that matches wins (literal segments before parameters before a
// wildcard); a request that matches none costs 1. The map is copied.
//
// A bad entry (a cost below 1, a malformed pattern or method) cannot be
// reported here: the function then gives every request cost 0, which the
// flow refuses with the ErrorResponder (500), so that the mistake shows on
// the first request rather than as a wrong limit. CheckCostByRoute reports
// it at startup.
func CostByRoute(costs map[string]int64) func(keyfuncs.Request) int64 {
	table, err := compileCosts(costs)
	if err != nil {
		return func(keyfuncs.Request) int64 { return 0 }
	}
	return func(r keyfuncs.Request) int64 {
		var m matcher
		m.init(r)
		for i := range table {
			e := &table[i]
			if (e.method == "" || methodMatches(e.method, r.Method())) && m.matches(&e.route) {
				return e.cost
			}
		}
		return 1
	}
}

// CheckCostByRoute reports the first bad entry of a map for CostByRoute,
// with an error wrapping core.ErrInvalidOption, and nil when every entry
// is good.
func CheckCostByRoute(costs map[string]int64) error {
	_, err := compileCosts(costs)
	return err
}

// costEntry is one entry of a CostByRoute table.
type costEntry struct {
	method string // upper case; "" for every method
	route  route
	cost   int64
}

// compileCosts returns the entries of costs, most specific first.
func compileCosts(costs map[string]int64) ([]costEntry, error) {
	table := make([]costEntry, 0, len(costs))
	for spec, cost := range costs {
		if cost < 1 {
			return nil, invalid("CostByRoute", fmt.Sprintf("entry %q: cost %d is not positive", spec, cost))
		}
		method, pattern, ok := strings.Cut(strings.TrimSpace(spec), " ")
		if !ok {
			method, pattern = "", spec
		}
		pattern = strings.TrimSpace(pattern)
		if method != "" && !validMethod(method) {
			return nil, invalid("CostByRoute", fmt.Sprintf("entry %q: bad method", spec))
		}
		rt, err := parseRoute(pattern)
		if err != nil {
			return nil, invalid("CostByRoute", fmt.Sprintf("entry %q: %v", spec, err))
		}
		table = append(table, costEntry{method: strings.ToUpper(method), route: rt, cost: cost})
	}
	slices.SortFunc(table, func(a, b costEntry) int {
		if c := a.route.compareSpecificity(&b.route); c != 0 {
			return c
		}
		if (a.method == "") != (b.method == "") {
			if a.method == "" {
				return 1
			}
			return -1
		}
		return strings.Compare(a.method+" "+a.route.pattern, b.method+" "+b.route.pattern)
	})
	return table, nil
}

// layerSet is the compiled layers of a Flow, in the order given.
type layerSet struct {
	layers    []flowLayer
	needsPath bool // some layer has Routes
}

// flowLayer is one layer as the flow runs it.
type flowLayer struct {
	name      string
	index     int // in the Limiter's Layers
	key       keyfuncs.Func
	policyFor func(keyfuncs.Request, string) (*core.Policy, error)
	cost      func(keyfuncs.Request) int64
	methods   []string // upper case; nil: all
	routes    []route  // nil: all
}

// compileLayers checks layers and returns them compiled, their indexes
// left for bindLayers to fill.
func compileLayers(fn string, layers []Layer) ([]flowLayer, error) {
	if len(layers) == 0 {
		return nil, invalid(fn, "no layer")
	}
	if len(layers) > limits.MaxLayers {
		return nil, invalid(fn, fmt.Sprintf("%d layers, more than %d", len(layers), limits.MaxLayers))
	}
	out := make([]flowLayer, len(layers))
	seen := make(map[string]bool, len(layers))
	for i, ly := range layers {
		if ly.Name == "" {
			return nil, invalid(fn, fmt.Sprintf("layer %d has no name", i))
		}
		if seen[strings.ToLower(ly.Name)] {
			return nil, invalid(fn, fmt.Sprintf("two layers are named %q, in some case", ly.Name))
		}
		seen[strings.ToLower(ly.Name)] = true
		if ly.Key == nil {
			return nil, invalid(fn, fmt.Sprintf("layer %q has no Key", ly.Name))
		}
		fl := flowLayer{name: ly.Name, key: ly.Key, policyFor: ly.PolicyFor, cost: ly.Cost}
		for _, m := range ly.Methods {
			if !validMethod(m) {
				return nil, invalid(fn, fmt.Sprintf("layer %q: bad method %q", ly.Name, m))
			}
			fl.methods = append(fl.methods, strings.ToUpper(m))
		}
		for _, p := range ly.Routes {
			rt, err := parseRoute(p)
			if err != nil {
				return nil, invalid(fn, fmt.Sprintf("layer %q: %v", ly.Name, err))
			}
			fl.routes = append(fl.routes, rt)
		}
		out[i] = fl
	}
	return out, nil
}

// bindLayers returns the layer set of layers for l, whose layers must be
// the same, by name, one to one, with the same policies.
func bindLayers(l *core.Limiter, layers []Layer) (*layerSet, error) {
	fls, err := compileLayers("WithLayers", layers)
	if err != nil {
		return nil, err
	}
	own := l.Layers()
	if own == nil {
		return nil, invalid("New", "WithLayers needs a layered Limiter (httplimit.NewLayered or core.NewLayered with the same layers)")
	}
	if len(own) != len(fls) {
		return nil, invalid("New", fmt.Sprintf("WithLayers has %d layers, the Limiter %d", len(fls), len(own)))
	}
	ls := &layerSet{layers: fls}
	for i := range fls {
		j, ok := l.LayerIndex(fls[i].name)
		if !ok {
			return nil, invalid("New", fmt.Sprintf("the Limiter has no layer %q", fls[i].name))
		}
		fls[i].index = j
		if !samePolicy(own[j].Policy, layers[i].Policy) || own[j].FailClosed != layers[i].FailClosed {
			return nil, invalid("New", fmt.Sprintf("the Limiter's layer %q has another policy or FailClosed than WithLayers's", fls[i].name))
		}
		if fls[i].routes != nil {
			ls.needsPath = true
		}
	}
	return ls, nil
}

// samePolicy reports whether the Limiter's policy of a layer, own, is
// the policy p given for it (whose Name may be empty), Lockout compared
// by value.
func samePolicy(own, p core.Policy) bool {
	if p.Name == "" {
		p.Name = own.Name
	}
	if (own.Lockout == nil) != (p.Lockout == nil) || own.Lockout != nil && *own.Lockout != *p.Lockout {
		return false
	}
	own.Lockout, p.Lockout = nil, nil
	return own == p
}

// validMethod reports whether m is an HTTP method token.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// methodMatches reports whether the request method got matches want,
// which is upper case: a GET layer applies to HEAD too.
func methodMatches(want, got string) bool {
	return strings.EqualFold(want, got) || want == "GET" && strings.EqualFold(got, "HEAD")
}

// applies reports whether ly applies to r, whose path m matches.
func (ly *flowLayer) applies(r keyfuncs.Request, m *matcher) bool {
	if ly.methods != nil {
		ok := false
		for _, want := range ly.methods {
			if methodMatches(want, r.Method()) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if ly.routes == nil {
		return true
	}
	for i := range ly.routes {
		if m.matches(&ly.routes[i]) {
			return true
		}
	}
	return false
}

// scratch is what one layered request needs, pooled: the checks, the
// verdict and its decisions would otherwise escape to the heap.
type scratch struct {
	checks [limits.MaxLayers]core.Check
	keys   [limits.MaxLayers]string
	ds     [limits.MaxLayers]core.Decision
	v      core.Verdict
	m      matcher
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// badPolicy is the policy a check carries when its layer's PolicyFor
// failed: invalid for every layer, so that the Limiter decides the request
// by its FailMode (core.Limiter.AllowLayers).
var badPolicy = core.Policy{}

// inPolicyFor names a layer's PolicyFor in a PanicError.
const inPolicyFor = "layer policy function"

// handleLayers is Handle for a layered flow, after the skips.
func (f *Flow) handleLayers(st *state, r keyfuncs.Request, w Response) bool {
	sc := scratches.Get().(*scratch)
	defer func() {
		clear(sc.checks[:])
		clear(sc.keys[:])
		clear(sc.ds[:])
		sc.v = core.Verdict{}
		sc.m.reset()
		scratches.Put(sc)
	}()
	ls := f.layers
	if ls.needsPath {
		sc.m.init(r)
	}
	st.in = inKey
	n := 0
	var keyErr error
	for i := range ls.layers {
		ly := &ls.layers[i]
		if !ly.applies(r, &sc.m) {
			continue
		}
		key, err := ly.key(r)
		if err == nil && key == "" {
			err = fmt.Errorf("%w: the key function returned an empty key", keyfuncs.ErrNoKey)
		}
		if err != nil {
			if keyErr == nil {
				keyErr = fmt.Errorf("layer %q: %w", ly.name, err)
			}
			continue
		}
		sc.checks[n] = core.Check{Layer: i, Key: key} // Layer: ours, for now
		sc.keys[n] = key
		n++
	}
	if f.allow != nil || f.deny403 != nil {
		switch l, e := f.checkKeys(st, r, sc.keys[:n]); l {
		case allowListed:
			f.reportKeys(sc.keys[:n], l)
			return f.proceed(st, r.Context(), r, w)
		case denyListed:
			f.reportKeys(sc.keys[:n], l)
			st.in = inForbidden
			f.forbidden(r, st.guard(w), e)
			return false
		}
	}
	if keyErr != nil {
		f.fail(st, r, w, keyErr)
		return false
	}
	if n == 0 {
		return f.proceed(st, r.Context(), r, w) // no layer applies
	}
	var policyErr error
	for i := range sc.checks[:n] {
		c := &sc.checks[i]
		ly := &ls.layers[c.Layer]
		c.Layer = ly.index
		c.Cost = 1
		if ly.cost != nil {
			st.in = inCost
			c.Cost = ly.cost(r)
		}
		if ly.policyFor != nil {
			st.in = inPolicyFor
			p, err := ly.policyFor(r, c.Key)
			switch {
			case err != nil:
				if policyErr == nil {
					policyErr = fmt.Errorf("%w: httplimit: layer %q: PolicyFor: %w", core.ErrInvalidPolicy, ly.name, err)
				}
				c.Policy = &badPolicy
			case p != nil:
				c.Policy = p
			}
		}
	}
	st.in = inLimiter
	ctx := r.Context()
	v := &sc.v
	v.Decisions = sc.ds[:0]
	err := f.limiter.AllowLayers(ctx, sc.checks[:n], v)
	if policyErr != nil && err != nil && v.Source == core.SourceFailMode {
		err = policyErr // the Limiter's error only says the policy was bad
	}
	if err != nil {
		if !failModeDecided(err, v.Source) {
			f.fail(st, r, w, err) // bad input, or the client left: no decision
			return false
		}
		st.in = inErrorHandler
		f.onError(r, err)
		if v.Source == core.SourceFallback {
			return f.decidedLayers(st, ctx, r, w, v) // a real decision, from the fallback store
		}
		if v.Allowed {
			return f.proceed(st, ctx, r, w) // failed open: no header, the store told nothing
		}
		if f.headers.RetryAfter {
			st.in = inHeaders
			w.Set(headers.RetryAfter, itoa(headers.RetryAfterSeconds(v.Decision)))
		}
		st.in = inUnavailable
		f.unavailable(r, st.guard(w), v.Decision)
		return false
	}
	return f.decidedLayers(st, ctx, r, w, v)
}

// failModeDecided reports whether a Limiter error came with a decision of
// the FailMode or the fallback store, which the flow honours, rather than
// with none (bad input, a client that left).
func failModeDecided(err error, src core.Source) bool {
	if errors.Is(err, core.ErrCanceled) {
		return false
	}
	return src == core.SourceFailMode || src == core.SourceFallback
}

// decidedLayers tells the client about v and passes (paced) or denies.
func (f *Flow) decidedLayers(st *state, ctx context.Context, r keyfuncs.Request, w Response, v *core.Verdict) bool {
	st.in = inHeaders
	headers.WriteLayers(w, v, time.Now(), f.headers)
	if !v.Allowed {
		st.in = inDeny
		f.deny(r, st.guard(w), v.Decision)
		return false
	}
	if v.Delay > 0 && f.maxDelay > 0 && !f.shadow && !pace(ctx, min(v.Delay, f.maxDelay)) {
		f.fail(st, r, w, canceled(ctx))
		return false
	}
	return f.proceed(st, ctx, r, w)
}

// checkKeys is check for a layered request: the client's address and the
// key of every layer that applies are matched against the allow lists,
// then the deny lists, so that allow wins over deny whatever the layer.
func (f *Flow) checkKeys(st *state, r keyfuncs.Request, keys []string) (listed, access.Entry) {
	if len(keys) <= 1 {
		k := ""
		if len(keys) == 1 {
			k = keys[0]
		}
		return f.check(st, r, k)
	}
	st.in = inAccess
	addr, err := f.clientIP.Addr(r)
	if err != nil {
		addr = netip.Addr{} // matches no range; a key entry may still match
	}
	now := time.Now()
	if e, ok := matchAny(f.allow, addr, keys, now); ok {
		return allowListed, e
	}
	if e, ok := matchAny(f.deny403, addr, keys, now); ok {
		return denyListed, e
	}
	return notListed, access.Entry{}
}

// matchAny returns the first entry of ms matching addr with any of keys.
func matchAny(ms []access.Matcher, addr netip.Addr, keys []string, now time.Time) (access.Entry, bool) {
	for _, m := range ms {
		for _, k := range keys {
			if e, ok := m.Match(addr, k, now); ok {
				return e, true
			}
		}
	}
	return access.Entry{}, false
}

// reportKeys is report for a layered request, as of its first layer's key.
func (f *Flow) reportKeys(keys []string, l listed) {
	k := ""
	if len(keys) > 0 {
		k = keys[0]
	}
	f.report(k, l)
}

// A route is a compiled route pattern of Layer.Routes or CostByRoute.
type route struct {
	pattern  string // as given
	segs     []routeSeg
	wildcard bool // ends with "/*": matches the segments and anything below
}

// routeSeg is one segment of a route: a literal, in lower case, or a
// parameter matching any one segment.
type routeSeg struct {
	lit   string
	param bool
}

// parseRoute compiles a route pattern: "/login", "/users/{id}",
// "/users/:id", "/api/*".
func parseRoute(p string) (route, error) {
	rt := route{pattern: p}
	if p == "" || p[0] != '/' {
		return rt, fmt.Errorf("route %q does not start with '/'", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("?#\\;%", c) >= 0 {
			return rt, fmt.Errorf("route %q has a byte %q that no normalized path has", p, c)
		}
	}
	parts := strings.Split(p[1:], "/")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1] // "/login/" is "/login"
	}
	if len(parts) == 1 && parts[0] == "" {
		return rt, nil // "/"
	}
	for i, s := range parts {
		switch {
		case s == "" || s == "." || s == "..":
			return rt, fmt.Errorf("route %q has an empty, \".\" or \"..\" segment", p)
		case s[0] == '*':
			if i != len(parts)-1 {
				return rt, fmt.Errorf("route %q has a wildcard before its last segment", p)
			}
			rt.wildcard = true
		case s[0] == ':' && len(s) > 1, s[0] == '{' && s[len(s)-1] == '}' && len(s) > 2:
			rt.segs = append(rt.segs, routeSeg{param: true})
		case strings.ContainsAny(s, "{}*") || s[0] == ':':
			return rt, fmt.Errorf("route %q has a malformed segment %q", p, s)
		default:
			rt.segs = append(rt.segs, routeSeg{lit: strings.ToLower(s)})
		}
	}
	return rt, nil
}

// compareSpecificity orders routes most specific first: without a
// wildcard before with one, more segments before fewer, fewer parameters
// before more.
func (rt *route) compareSpecificity(o *route) int {
	if rt.wildcard != o.wildcard {
		if rt.wildcard {
			return 1
		}
		return -1
	}
	if len(rt.segs) != len(o.segs) {
		return len(o.segs) - len(rt.segs)
	}
	return rt.params() - o.params()
}

// params is how many parameter segments rt has.
func (rt *route) params() int {
	n := 0
	for _, s := range rt.segs {
		if s.param {
			n++
		}
	}
	return n
}

// matchSegs reports whether the path p matches rt.
func (rt *route) matchSegs(p *pathSegs) bool {
	if rt.wildcard {
		if p.ns < len(rt.segs) {
			return false
		}
	} else if p.ns != len(rt.segs) {
		return false
	}
	b := p.bytes()
	for i := range rt.segs {
		if rt.segs[i].param {
			continue
		}
		s := p.seg(i)
		if !equalLower(b[s.start:s.end], rt.segs[i].lit) {
			return false
		}
	}
	return true
}

// equalLower reports whether b, ASCII letters folded to lower case, is
// lower.
func equalLower(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// Sizes of a pathSegs' own arrays; longer paths use the heap.
const (
	pathBuf = 512
	maxSegs = 32
)

// seg is the bounds of one segment in a pathSegs' bytes.
type seg struct{ start, end int32 }

// pathSegs is a normalized path, split in segments (see WithLayers).
type pathSegs struct {
	buf  [pathBuf]byte
	big  []byte // the path, when longer than buf
	n    int    // its length in buf
	segs [maxSegs]seg
	more []seg // segments past maxSegs
	ns   int
}

// bytes returns the normalized path's bytes.
func (p *pathSegs) bytes() []byte {
	if p.big != nil {
		return p.big
	}
	return p.buf[:p.n]
}

// seg returns the i-th segment's bounds.
func (p *pathSegs) seg(i int) seg {
	if i < maxSegs {
		return p.segs[i]
	}
	return p.more[i-maxSegs]
}

// push appends a segment.
func (p *pathSegs) push(s seg) {
	if p.ns < maxSegs {
		p.segs[p.ns] = s
	} else {
		p.more = append(p.more, s)
	}
	p.ns++
}

// pop drops the last segment, if any.
func (p *pathSegs) pop() {
	if p.ns == 0 {
		return
	}
	p.ns--
	if p.ns >= maxSegs {
		p.more = p.more[:p.ns-maxSegs]
	}
}

// maxUnescapes is how many rounds of percent-decoding a path gets: a path
// encoded twice ("%256Cogin") is decoded too.
const maxUnescapes = 3

// set normalizes path into p: cut at '?' and '#', percent-decoded,
// backslashes as slashes, split in segments each cut at ';', empty and
// "." segments dropped, ".." resolved.
func (p *pathSegs) set(path string) {
	p.big, p.more, p.n, p.ns = nil, p.more[:0], 0, 0
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	var b []byte
	if len(path) <= pathBuf {
		b = append(p.buf[:0], path...)
	} else {
		b = []byte(path)
	}
	for range maxUnescapes {
		var changed bool
		if b, changed = unescape(b); !changed {
			break
		}
	}
	for i, c := range b {
		if c == '?' || c == '#' {
			b = b[:i]
			break
		}
	}
	if len(path) <= pathBuf {
		p.n = len(b)
	} else {
		p.big = b
	}
	for i := 0; i <= len(b); {
		j := i
		for j < len(b) && b[j] != '/' && b[j] != '\\' {
			j++
		}
		end := j
		for k := i; k < j; k++ {
			if b[k] == ';' {
				end = k
				break
			}
		}
		switch s := b[i:end]; {
		case len(s) == 0, len(s) == 1 && s[0] == '.':
		case len(s) == 2 && s[0] == '.' && s[1] == '.':
			p.pop()
		default:
			p.push(seg{int32(i), int32(end)})
		}
		i = j + 1
	}
}

// unescape percent-decodes b in place, and reports whether it decoded
// anything. A '%' not followed by two hex digits stays as it is.
func unescape(b []byte) ([]byte, bool) {
	w := 0
	changed := false
	for r := 0; r < len(b); r++ {
		if b[r] == '%' && r+2 < len(b) && ishex(b[r+1]) && ishex(b[r+2]) {
			b[w] = unhex(b[r+1])<<4 | unhex(b[r+2])
			r += 2
			changed = true
		} else {
			b[w] = b[r]
		}
		w++
	}
	return b[:w], changed
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// matcher matches one request against routes: its normalized path (a
// PathRequest's), else its Route pattern, worked out once, when a route
// first needs it.
type matcher struct {
	r                   keyfuncs.Request
	path, route         pathSegs
	pathDone, routeDone bool
	hasPath, hasRoute   bool
}

// init readies m for r.
func (m *matcher) init(r keyfuncs.Request) {
	m.r = r
	m.pathDone, m.routeDone, m.hasPath, m.hasRoute = false, false, false, false
}

// reset drops what m holds of its request.
func (m *matcher) reset() {
	m.r = nil
	m.path.big, m.route.big = nil, nil
	m.path.more, m.route.more = nil, nil
}

// matches reports whether the request matches rt, by its path, or by its
// Route pattern when it has no path.
func (m *matcher) matches(rt *route) bool {
	if !m.pathDone {
		m.pathDone = true
		if pr, ok := m.r.(PathRequest); ok {
			m.path.set(pr.Path())
			m.hasPath = true
		}
	}
	if m.hasPath {
		// The path is what the router routes on: its Route pattern, which
		// some routers work out at a cost (chi's tree walk), adds nothing.
		return rt.matchSegs(&m.path)
	}
	if !m.routeDone {
		m.routeDone = true
		if s := m.r.Route(); s != "" && len(s) <= keyfuncs.MaxRouteLen {
			m.route.set(s)
			m.hasRoute = true
		}
	}
	return m.hasRoute && rt.matchSegs(&m.route)
}
