package limitertest

import (
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/glue/hooks"
)

// Observer is a core.Observer of a function: every Limiter it is given to
// reports its Events to it.
type Observer func(core.Event)

// Bind returns o itself.
func (o Observer) Bind(*core.Limiter) (func(core.Event), error) { return o, nil }

// CircuitBreaker is the Limiter option, not public, that sets its circuit
// breaker: failures consecutive store failures open it (0: never), and an
// open breaker probes the store at most once per probe.
func CircuitBreaker(failures int, probe time.Duration) core.Option {
	return hooks.CircuitBreaker(failures, probe).(core.Option)
}

// FailClosed is the Limiter option, not public, that makes every policy of
// the Limiter fail closed for d (Policy.FailClosed), for a test that runs
// one configuration under both outage answers.
func FailClosed(d time.Duration) core.Option {
	return hooks.FailClosed(d).(core.Option)
}
