package storetest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestPlansCatchBrokenStores runs runPlans, with a recording tester,
// against a correct memstore, which must pass, and against stores that
// each break one rule of a move between plans, which must fail under
// every algorithm.
func TestPlansCatchBrokenStores(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		store := newMemstore(t)
		rec := newRecorder()
		runPlans(rec, func(tester) core.Store { return store })
		require.Empty(t, rec.all(), "runPlans fails a correct store")
	})
	for name, breaker := range map[string]func(inner core.Store) core.Store{
		// Each plan has a state of its own: a move forgets the usage.
		"forgets-usage-on-a-move": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				req.Policy.Name += fmt.Sprint(req.Policy.Limit)
				return take(req)
			}}
		},
		// Remaining is the capacity less the usage, below 0 when the
		// usage is above the capacity.
		"remaining-below-zero": func(inner core.Store) core.Store {
			return &broken{Store: inner, breakTake: func(req core.Request, take func(core.Request) (core.Decision, error)) (core.Decision, error) {
				d, err := take(req)
				if err == nil && !d.Allowed && d.Remaining == 0 {
					d.Remaining = -1
				}
				return d, err
			}}
		},
		"retry-after-1ms-short": brokenStores()["retry-after-1ms-short"],
	} {
		t.Run(name, func(t *testing.T) {
			store := breaker(newMemstore(t))
			rec := newRecorder()
			runPlans(rec, func(tester) core.Store { return store })
			for _, alg := range limits.Algorithms[core.Algorithm]() {
				assert.NotEmpty(t, rec.under("suite/plans/"+string(alg)), "runPlans passes %s under a store that %s", alg, name)
			}
		})
	}
}
