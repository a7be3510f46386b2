package httplimit

import (
	"github.com/apigate/ratelimit/internal/glue/flowinfo"
	"github.com/apigate/ratelimit/keyfuncs"
)

func init() { flowinfo.Of = func(f any) flowinfo.Flow { return f.(*Flow).info() } }

// info is what f was built from, for the module's describers.
func (f *Flow) info() flowinfo.Flow {
	ps := f.limiter.Policies()
	out := flowinfo.Flow{Headers: f.headers, Problems: f.problems, Lists: f.allow != nil || f.deny403 != nil}
	if f.quota != nil {
		out.Quota = f.quota.route.pattern
	}
	for i := range f.layers.layers {
		ly := &f.layers.layers[i]
		fl := flowinfo.Layer{Policy: ps[i], Methods: ly.methods, Cost: ly.cost, Key: ly.key}
		for _, rt := range ly.routes {
			fl.Routes = append(fl.Routes, rt.pattern)
		}
		fl.Applies = func(r keyfuncs.Request) bool {
			var m matcher
			m.init(r)
			return ly.applies(r, &m)
		}
		out.Layers = append(out.Layers, fl)
	}
	return out
}
