package httplimit

import (
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/keyfuncs"
)

// What a Flow was built from, for describers (package openapi, or one of
// your own): each answer is a copy, safe to keep.

// Layers returns the Flow's layers in the order it checks them, each
// Policy with its Name filled in (a PolicySource may choose another per
// request), Key the client address's when the layer gave none, Methods
// upper case. A layer that counts successes (CountSuccesses) is followed
// by its companion, the layer that counts failures.
func (f *Flow) Layers() []Layer {
	ps := f.limiter.Policies()
	out := make([]Layer, len(f.layers.layers))
	for i := range f.layers.layers {
		ly := &f.layers.layers[i]
		out[i] = Layer{Policy: ps[i], Key: ly.key, Cost: ly.cost, Counts: ly.counts, IsFailure: ly.isFailure,
			Methods: append([]string(nil), ly.methods...)}
		for _, rt := range ly.routes {
			out[i].Routes = append(out[i].Routes, rt.pattern)
		}
	}
	return out
}

// Applies reports whether the layer at index i of Layers applies to r, by
// its methods and routes, matched as the Flow matches them (a route
// template's parameter, "{id}", is one segment). It is false for an
// index out of range.
func (f *Flow) Applies(i int, r keyfuncs.Request) bool {
	if i < 0 || i >= len(f.layers.layers) {
		return false
	}
	var m matcher
	m.init(r)
	return f.layers.layers[i].applies(r, &m)
}

// Headers returns the response header fields the Flow writes
// (WithHeaders).
func (f *Flow) Headers() headers.Config { return f.headers }

// ProblemDetails reports whether the Flow answers problem details to the
// clients that ask for them (WithProblemDetails).
func (f *Flow) ProblemDetails() bool { return f.problems }

// Lists reports whether the Flow has allow or deny lists
// (WithAllowList, WithDenyList): a deny-listed client gets 403.
func (f *Flow) Lists() bool { return f.allow != nil || f.deny403 != nil }

// Quota returns the path of the Flow's quota endpoint (WithQuota), "" when
// it has none.
func (f *Flow) Quota() string {
	if f.quota == nil {
		return ""
	}
	return f.quota.route.pattern
}
