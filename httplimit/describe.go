package httplimit

import (
	"context"

	"github.com/apigate/ratelimit/internal/flowinfo"
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
		fl.Applies = func(method, path string) bool {
			r := &describedRequest{method: method, path: path}
			var m matcher
			m.init(r)
			return ly.applies(r, &m)
		}
		out.Layers = append(out.Layers, fl)
	}
	return out
}

// describedRequest is a request of a method to a path, and nothing else.
type describedRequest struct{ method, path string }

func (r *describedRequest) RemoteAddr() string           { return "" }
func (r *describedRequest) Header(string) string         { return "" }
func (r *describedRequest) HeaderValues(string) []string { return nil }
func (r *describedRequest) Query(string) string          { return "" }
func (r *describedRequest) Method() string               { return r.method }
func (r *describedRequest) Route() string                { return r.path }
func (r *describedRequest) Path() string                 { return r.path }
func (r *describedRequest) Context() context.Context     { return context.Background() }
