// Package storecall calls a core.Store about one request, for tests that
// ask a store directly: Take, Peek and Refund take slices.
package storecall

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Take is s.Take of r alone: its decision and the time it decided at.
func Take(s core.Store, ctx context.Context, now time.Time, r core.Request) (core.Decision, time.Time, error) {
	var out [1]core.Decision
	at, err := s.Take(ctx, now, []core.Request{r}, out[:])
	return out[0], at, err
}

// Peek is s.Peek of r alone, at a cost of 1 (r's is ignored).
func Peek(s core.Store, ctx context.Context, now time.Time, r core.Request) (core.Decision, error) {
	var out [1]core.Decision
	r.Cost = 1
	err := s.Peek(ctx, now, []core.Request{r}, out[:])
	return out[0], err
}

// Refund is s.Refund of r alone, of the admission Take returned at for.
func Refund(s core.Store, ctx context.Context, at time.Time, r core.Request) error {
	return s.Refund(ctx, at, []core.Request{r})
}
