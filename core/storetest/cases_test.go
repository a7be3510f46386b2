package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestCasesAreTheScripts checks that Cases exports the scripts the suite
// runs: as many cases and steps for each algorithm, in the same order, with
// the same fields.
func TestCasesAreTheScripts(t *testing.T) {
	cases := cases()
	var nScripts, nSteps, nCaseSteps int
	i := 0
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		ss := scripts(alg)
		require.NotEmpty(t, ss, "%s has no scripts", alg)
		for _, s := range ss {
			require.Less(t, i, len(cases), "Cases ends before %s/%s", alg, s.name)
			c := cases[i]
			i++
			assert.Equal(t, s.name, c.Name)
			assert.Equal(t, s.policy, c.Policy, s.name)
			assert.Equal(t, s.start, c.Start, s.name)
			assert.Equal(t, s.viaLimiter, c.ViaLimiter, s.name)
			require.Len(t, c.Steps, len(s.steps), "%s/%s", alg, s.name)
			for j, st := range s.steps {
				assert.Equal(t, step{at: c.Steps[j].At, cost: c.Steps[j].Cost, key: c.Steps[j].Key, name: c.Steps[j].PolicyName, reset: c.Steps[j].Reset, want: c.Steps[j].Want}, st,
					"%s/%s step %d", alg, s.name, j)
			}
			nScripts++
			nSteps += len(s.steps)
		}
	}
	for _, c := range cases {
		nCaseSteps += len(c.Steps)
	}
	assert.Len(t, cases, nScripts, "cases")
	assert.Equal(t, nSteps, nCaseSteps, "steps")
	t.Logf("%d cases, %d steps", len(cases), nCaseSteps)
}

// TestCasesAreWhatRunPlays checks that the scripted subtests runSuite
// starts are Cases, by name and in order.
func TestCasesAreWhatRunPlays(t *testing.T) {
	var want []string
	for _, c := range cases() {
		want = append(want, string(c.Policy.Algorithm)+"/"+c.Name)
	}
	names := &subtests{}
	runSuite(names, func(tester) core.Store {
		t.Fatal("a case ran: subtests only lists them")
		return nil
	})
	got := slices.DeleteFunc(names.started, func(name string) bool {
		_, sub, _ := strings.Cut(name, "/")
		return sub == "clock-step-back" || sub == "extremes" || sub == "lockout-extremes" || sub == "prompt-cancel"
	})
	assert.Equal(t, want, got)
}

// subtests is a tester that runs the suite's algorithms but not their
// subtests, whose names it lists, algorithm/subtest.
type subtests struct {
	prefix  string
	started []string
	root    *subtests
}

func (s *subtests) Helper()                   {}
func (s *subtests) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (s *subtests) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (s *subtests) run(name string, f func(t tester)) bool {
	root := s.root
	if root == nil {
		root = s
	}
	if s.prefix == "" {
		f(&subtests{prefix: name, root: root})
		return true
	}
	root.started = append(root.started, s.prefix+"/"+name)
	return true
}
