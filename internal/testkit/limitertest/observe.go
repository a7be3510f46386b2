package limitertest

import "github.com/apigate/ratelimit/core"

// Observer is a core.Observer of a function: every Limiter it is given to
// reports its Events to it.
type Observer func(core.Event)

// Bind returns o itself.
func (o Observer) Bind(*core.Limiter) (func(core.Event), error) { return o, nil }
