// Package reqcheck checks a core.Request against the contract a Limiter
// keeps, for the stores, which are also called directly (tests, tools) and
// must answer bad input with an error, never a panic.
package reqcheck

import (
	"fmt"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Validate reports whether r keeps the contract on core.Request, wrapping
// core.ErrInvalidOption, core.ErrInvalidOption, core.ErrInvalidOption or
// core.ErrInvalidOption.
func Validate(r *core.Request) error {
	if r.Key == "" {
		return fmt.Errorf("%w: empty key", core.ErrInvalidOption)
	}
	if err := r.Policy.Validate(); err != nil {
		return err
	}
	// A negative cost is a give-back of at most the capacity.
	if c := limits.Capacity(r.Policy.Algorithm, r.Policy.Limit, r.Policy.Burst); r.Cost > c || r.Cost < -c {
		return fmt.Errorf("%w: cost %d, capacity %d", core.ErrInvalidOption, r.Cost, c)
	}
	return nil
}
