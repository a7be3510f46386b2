package openapi

import (
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// flowDesc is what the describers read of an httplimit.Flow, through its
// public methods.
type flowDesc struct {
	Layers   []layerDesc
	Headers  headers.Config
	Problems bool
	Lists    bool
	Quota    string
}

// layerDesc is one layer of a flowDesc.
type layerDesc struct {
	Policy          core.Policy
	Methods, Routes []string
	Cost            func(keyfuncs.Request) int64
	Key             keyfuncs.Func
	Counts          httplimit.Counts
	Applies         func(r keyfuncs.Request) bool
}

// describeFlow reads f.
func describeFlow(f *httplimit.Flow) flowDesc {
	out := flowDesc{Headers: f.Headers(), Problems: f.ProblemDetails(), Lists: f.Lists(), Quota: f.Quota()}
	for i, ly := range f.Layers() {
		out.Layers = append(out.Layers, layerDesc{
			Policy: ly.Policy, Methods: ly.Methods, Routes: ly.Routes, Cost: ly.Cost, Key: ly.Key, Counts: ly.Counts,
			Applies: func(r keyfuncs.Request) bool { return f.Applies(i, r) },
		})
	}
	return out
}
