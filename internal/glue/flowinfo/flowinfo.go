// Package flowinfo lets the module's describers (OpenAPI, Markdown) read
// what an httplimit.Flow was built from, which the public API does not
// show. httplimit sets Of in its init.
package flowinfo

import (
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Flow is what a Flow was built from.
type Flow struct {
	// Layers are the Flow's layers, in order.
	Layers []Layer
	// Headers are the response header fields the Flow writes.
	Headers headers.Config
	// Problems says the Flow answers problem details to the clients that
	// ask (httplimit.WithProblemDetails).
	Problems bool
	// Lists says the Flow has allow or deny lists: a deny-listed client
	// gets 403.
	Lists bool
	// Quota is the path of the Flow's quota endpoint (httplimit.WithQuota),
	// "" when it has none.
	Quota string
}

// Layer is one layer of a Flow.
type Layer struct {
	// Policy is the layer's policy, its Name filled in (a PolicySource may
	// choose another per request).
	Policy core.Policy
	// Methods (upper case) and Routes (the patterns as given) limit the
	// layer; nil: every method, every path.
	Methods, Routes []string
	// Cost is the layer's cost function, nil for 1 a request.
	Cost func(keyfuncs.Request) int64
	// Key is the layer's key function (the Flow's client address when the
	// layer gave none).
	Key keyfuncs.Func
	// Applies reports whether the layer applies to r, by its method and
	// path (or route), matched as the Flow matches them.
	Applies func(r keyfuncs.Request) bool
}

// Of returns what flow, an *httplimit.Flow, was built from.
var Of func(flow any) Flow
