package limitertest

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Verdict is a layered decision as tests read it: the request's Decision,
// every layer's (Decisions[i] is layer i's, zero for a layer not checked),
// and the layer of the binding one (-1 when nothing was decided).
type Verdict struct {
	core.Decision
	Decisions []core.Decision
	Binding   int
}

// AllowLayers is l.AllowLayers at now, filling v.
func AllowLayers(l *core.Limiter, ctx context.Context, reqs []core.Request, now time.Time, v *Verdict) error {
	if cap(v.Decisions) < len(reqs) {
		v.Decisions = make([]core.Decision, len(reqs))
	}
	v.Decisions = v.Decisions[:len(reqs)]
	clear(v.Decisions)
	d, _, err := l.AllowLayers(ctx, now, reqs, v.Decisions)
	v.Decision, v.Binding = d, -1
	for i := range v.Decisions {
		if reqs[i].Key != "" && v.Decisions[i].Policy.Name == d.Policy.Name && d.Policy.Name != "" {
			v.Binding = i
			break
		}
	}
	if err != nil {
		v.Binding = -1
		for i := range reqs {
			if reqs[i].Key != "" {
				v.Binding = i // refused: the first layer checked
				break
			}
		}
	}
	return err
}

// Named is p with the Name name, failing closed for the first
// failClosed, if given.
func Named(p core.Policy, name string, failClosed ...time.Duration) core.Policy {
	p.Name = name
	if len(failClosed) > 0 {
		p.FailClosed = failClosed[0]
	}
	return p
}

// AllowNTimed decides a request of cost n from key on l's first layer, as
// AllowN does, and returns the time the store decided at when it decided
// (the zero Time otherwise), as AllowLayers does.
func AllowNTimed(l *core.Limiter, ctx context.Context, key string, n int64) (core.Decision, time.Time, error) {
	reqs := [1]core.Request{{Key: key, Cost: n}}
	return l.AllowLayers(ctx, time.Time{}, reqs[:], nil)
}
