package storetest

import (
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/glue/storecases"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

func init() { storecases.Cases = cases }

// cases returns every scripted case that Run plays, in the order it plays
// them: by algorithm, in the order FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, LeakyBucket, each algorithm's
// cases in their own order. They are converted from the suite's scripts on
// each call, so the caller owns the slices returned. Run's other checks
// (a clock that steps back, the ends of the valid range) and RunConcurrent
// are not scripted and are not among them.
func cases() []storecases.Case {
	var out []storecases.Case
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		for _, s := range scripts(alg) {
			out = append(out, s.export())
		}
	}
	return out
}

// export converts s to the Case that Cases returns.
func (s *script) export() storecases.Case {
	c := storecases.Case{Name: s.name, Policy: s.policy, Start: s.start, ViaLimiter: s.viaLimiter, Steps: make([]storecases.Step, len(s.steps))}
	for i, st := range s.steps {
		c.Steps[i] = storecases.Step{At: st.at, Cost: st.cost, Key: st.key, PolicyName: st.name, Reset: st.reset, Want: st.want}
	}
	return c
}
