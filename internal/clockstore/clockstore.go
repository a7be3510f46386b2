// Package clockstore is for tests: it gives a store's requests an explicit
// time, core.Request.Now, where a test reaches the Limiter through HTTP and
// cannot call Limiter.AllowAt itself.
package clockstore

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/limits"
)

// At returns s with the zero Now of every Request it takes set to now, so
// that s decides at now whatever the real time. The Limiter's own clock
// (its deny cache, its circuit breaker) stays the real one.
func At(s core.Store, now time.Time) core.Store { return store{s, now} }

type store struct {
	core.Store
	now time.Time
}

func (s store) Take(ctx context.Context, req core.Request) (core.Decision, error) {
	if req.Now.IsZero() {
		req.Now = s.now
	}
	return s.Store.Take(ctx, req)
}

// TakeAll is the inner store's TakeAll, every zero Now set to the store's
// time; it fails when the inner store is not a core.MultiTaker.
func (s store) TakeAll(ctx context.Context, reqs []core.Request, out []core.Decision) error {
	m, ok := s.Store.(core.MultiTaker)
	if !ok {
		return fmt.Errorf("clockstore: %T is not a core.MultiTaker", s.Store)
	}
	var own [limits.MaxLayers]core.Request
	n := copy(own[:], reqs)
	for i := range own[:n] {
		if own[i].Now.IsZero() {
			own[i].Now = s.now
		}
	}
	return m.TakeAll(ctx, own[:n], out)
}
