package httplimit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Layer is one named limit of a [Flow]: the whole API, a user, an
// endpoint, an address; a single limit is a Flow of one Layer. Each
// request is checked, in one Limiter call, against every layer that
// applies to it (by Methods and Routes): it passes only when all of them
// admit it, and one denied by any layer takes nothing from any. A request
// to which no layer applies passes untouched, with no header. Key entries
// of the allow and deny lists are matched against the key of every layer
// that applies.
//
// X-RateLimit-* and RateLimit-* describe the binding layer (the one that
// denied, or the one with the least left); the draft-10 RateLimit and
// RateLimit-Policy fields list every layer that applied; Retry-After is
// when every layer admits again; a leaky-bucket layer paces the request by
// the longest Delay. A policy chosen per request (a plan) is a
// core.PolicySource's, given with WithCore(core.WithPolicySource(src)).
// docs/layers.md is the guide.
type Layer struct {
	// Policy is the layer's policy, unless a core.PolicySource chooses
	// another for a request (see above). Its Name names the layer: unique
	// whatever the case ("login" and "Login" are one name twice), at most
	// 64 characters of [A-Za-z0-9._-]. It names the layer's item in the
	// RateLimit and RateLimit-Policy headers, and its state in the store.
	// Of a Flow's only layer it may be empty (the policy's DefaultName); of
	// several, every one needs it.
	Policy core.Policy
	// Key says who the client is under this layer (keyfuncs.Static for
	// one key shared by every request, keyfuncs.FirstOf(user, ip) for a
	// user falling back to its address; keyfuncs.Compose with
	// keyfuncs.Route to limit per endpoint). Nil is the client's address,
	// WithClientIP's Key: by default the socket peer, IPv6 grouped by /56,
	// no forwarding header believed. A key function that fails, or returns
	// an empty key, fails the request (400 for keyfuncs.ErrNoKey, 500
	// otherwise): to fall back to another key, use keyfuncs.FirstOf.
	Key keyfuncs.Func
	// Methods limits the layer to requests of these methods, compared
	// case-insensitively; a layer on GET applies to HEAD too, which most
	// routers serve with the GET handler. Empty: every method.
	Methods []string
	// Routes limits the layer to requests whose path matches one of these
	// patterns: "/login"; "/users/{id}" or "/users/:id", a parameter
	// matching one path segment; "/api/*", a suffix wildcard matching
	// "/api" and every path below it. Empty: every path. So that no
	// spelling of a path slips past a layer, the path is percent-decoded
	// (twice encoded too), cut at '?', '#' and each segment's ';', its
	// backslashes read as slashes, its empty and "." segments dropped and
	// its ".." segments resolved, its trailing slash ignored, and compared
	// case-insensitively: a layer may apply to a request the router would
	// not send to its route (costing the client a unit), never miss one
	// the router would.
	Routes []string
	// Cost says how many units a request takes from this layer (1 when
	// nil); see CostByRoute. A cost below 1 or above the policy's capacity
	// is a programming error: the request gets the Responder's answer (500
	// by default), never a panic and never a 429.
	Cost func(keyfuncs.Request) int64
	// Counts says which admitted requests the layer counts, by how they
	// ended: all of them (CountAll, the zero value), only failures, only
	// successes, or what the response reports they cost; see Counts for
	// how such a layer reserves and settles.
	Counts Counts
	// IsFailure tells a failure by the response's status, for a layer
	// that counts failures or successes, when the handler did not
	// Report: nil is 400 and above (so 401 and 403, and 429 and 5xx,
	// fail). Given to a layer of another Counts, it is an error.
	IsFailure func(status int) bool
}

// CostByRoute returns a Layer.Cost function weighing requests
// by route: costs maps "METHOD /pattern", or "/pattern" for every method,
// to the cost of the requests it matches, with patterns as Layer.Routes
// takes them ("GET /search": 5, "POST /export/*": 100). The most specific
// entry that matches wins (literal segments before parameters before a
// wildcard); a request that matches none costs 1. The map is copied.
// A bad entry (a cost below 1, a malformed pattern or method) is an error
// wrapping core.ErrInvalidOption.
func CostByRoute(costs map[string]int64) (func(keyfuncs.Request) int64, error) {
	table, err := compileCosts(costs)
	if err != nil {
		return nil, err
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
	}, nil
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
	name       string
	key        keyfuncs.Func
	cost       func(keyfuncs.Request) int64
	methods    []string // upper case; nil: all
	routes     []route  // nil: all
	counts     Counts
	isFailure  func(int) bool
	defaultKey bool // key is the client address's (WithClientIP): the layer had no Key
}

// withCompanions returns layers with, after each CountSuccesses layer, its
// companion (see CountSuccesses), or layers itself when none counts
// successes. A CountSuccesses layer without a name is an error.
func withCompanions(layers []Layer) ([]Layer, error) {
	var out []Layer
	for i, ly := range layers {
		if ly.Counts != CountSuccesses {
			if out != nil {
				out = append(out, ly)
			}
			continue
		}
		if ly.Policy.Name == "" {
			return nil, invalid("New", fmt.Sprintf("layer %d counts successes and has no name (Policy.Name): its companion is named after it", i))
		}
		if out == nil {
			out = append(make([]Layer, 0, len(layers)+1), layers[:i]...)
		}
		c := ly
		c.Counts = CountFailures
		c.Policy.Name += companionSuffix
		out = append(out, ly, c)
	}
	if out == nil {
		return layers, nil
	}
	return out, nil
}

// compileLayers checks layers and returns them compiled, a nil Key left
// for New to fill.
func compileLayers(layers []Layer) (*layerSet, error) {
	const fn = "New"
	if len(layers) == 0 {
		return nil, invalid(fn, "no layer")
	}
	if len(layers) > limits.MaxLayers {
		return nil, invalid(fn, fmt.Sprintf("%d layers, more than %d", len(layers), limits.MaxLayers))
	}
	ls := &layerSet{layers: make([]flowLayer, len(layers))}
	seen := make(map[string]bool, len(layers))
	for i, ly := range layers {
		name := ly.Policy.Name
		if name == "" && len(layers) > 1 {
			return nil, invalid(fn, fmt.Sprintf("layer %d has no name (Policy.Name): each of several layers needs one", i))
		}
		if seen[strings.ToLower(name)] {
			return nil, invalid(fn, fmt.Sprintf("two layers are named %q, in some case", name))
		}
		seen[strings.ToLower(name)] = true
		fl := flowLayer{name: name, key: ly.Key, cost: ly.Cost, counts: ly.Counts, isFailure: ly.IsFailure}
		switch {
		case ly.Counts > CountReported:
			return nil, invalid(fn, fmt.Sprintf("layer %q: unknown Counts %d", name, ly.Counts))
		case ly.IsFailure != nil && ly.Counts != CountFailures && ly.Counts != CountSuccesses:
			return nil, invalid(fn, fmt.Sprintf("layer %q: IsFailure for a layer that counts %s: it would never be asked", name, countsName(ly.Counts)))
		case ly.Counts == CountReported && ly.Cost == nil:
			return nil, invalid(fn, fmt.Sprintf("layer %q: CountReported needs a Cost, the most a request may cost, which it reserves", name))
		}
		for _, m := range ly.Methods {
			if !validMethod(m) {
				return nil, invalid(fn, fmt.Sprintf("layer %q: bad method %q", name, m))
			}
			fl.methods = append(fl.methods, strings.ToUpper(m))
		}
		for _, p := range ly.Routes {
			rt, err := parseRoute(p)
			if err != nil {
				return nil, invalid(fn, fmt.Sprintf("layer %q: %v", name, err))
			}
			fl.routes = append(fl.routes, rt)
		}
		if fl.routes != nil {
			ls.needsPath = true
		}
		ls.layers[i] = fl
	}
	return ls, nil
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
