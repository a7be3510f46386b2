package sim_test

import (
	"cmp"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/core"
)

// suiteScripts are every scripted case of the conformance suite.
func suiteScripts() []script {
	return slices.Concat(fixedWindowScripts(), slidingLogScripts(), slidingCounterScripts(),
		tokenBucketScripts(), leakyBucketScripts())
}

// TestConformanceDecisions replays every scripted case of core/storetest
// as CSV traces through the simulator, on the memory store with the
// trace's times as the clock, and compares every Decision with the one the
// suite expects. A trace has no Reset, and the simulator gives each policy
// a store of its own; both change nothing to the decisions, so:
//   - after a Reset of a key, the key's later steps use a fresh key, whose
//     state is the one a Reset leaves (none);
//   - the steps under another policy name are a trace of their own,
//     replayed under that policy (a policy's state is its own in the
//     suite's store too, which is what those steps check);
//   - within a trace, steps are sorted by time, a stable sort: the keys of
//     a script are independent, and each key's steps keep their order.
func TestConformanceDecisions(t *testing.T) {
	scripts := suiteScripts()
	require.GreaterOrEqual(t, len(scripts), 38, "the suite's scripts")
	for _, s := range scripts {
		t.Run(string(s.policy.Algorithm)+"/"+s.name, func(t *testing.T) {
			type request struct {
				step int
				at   time.Duration
				key  string
				cost int64
			}
			traces := map[string][]request{} // by policy name
			resets := map[string]int{}       // by policy name and key
			for i, st := range s.steps {
				name := cmp.Or(st.name, s.policy.Name)
				key := "client"
				if st.key != "" {
					key += "-" + st.key
				}
				if st.reset {
					resets[name+"|"+key]++
					continue
				}
				if n := resets[name+"|"+key]; n > 0 {
					key += fmt.Sprintf("#reset%d", n)
				}
				traces[name] = append(traces[name], request{i, s.start + st.at, key, cmp.Or(st.cost, 1)})
			}
			checked := 0
			for name, reqs := range traces {
				slices.SortStableFunc(reqs, func(a, b request) int { return cmp.Compare(a.at, b.at) })
				var csv strings.Builder
				for _, r := range reqs {
					fmt.Fprintf(&csv, "%d.%09d,%s,%d\n", r.at/time.Second, r.at%time.Second, r.key, r.cost)
				}
				events, err := sim.ParseCSV(strings.NewReader(csv.String()))
				require.NoError(t, err)
				p := s.policy
				p.Name = name
				res, err := sim.Run(context.Background(), []core.Policy{p}, events, sim.Options{Decisions: true})
				require.NoError(t, err)
				require.Len(t, res, 1)
				require.Len(t, res[0].Decisions, len(reqs))
				for j, r := range reqs {
					want := s.steps[r.step].want
					if want.Limit == 0 {
						want.Limit = p.Capacity()
					}
					got := res[0].Decisions[j]
					assert.Equal(t, show(want, core.SourceStore), show(got, got.Source),
						"step %d (at %v, cost %d, key %q, policy %q)", r.step, s.steps[r.step].at, r.cost, r.key, name)
					checked++
				}
			}
			assert.Positive(t, checked)
		})
	}
}

// show formats the fields of a Decision that the suite compares.
func show(d core.Decision, source core.Source) string {
	return fmt.Sprintf("allowed=%v limit=%d remaining=%d reset=%v retry=%v delay=%v source=%v",
		d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay, source)
}

// TestScriptsAreTheSuites checks that storetest_scripts_test.go holds the
// suite's scripts as they are now: every function of core/storetest's
// windows.go and buckets.go, the same text from "func" to "}".
func TestScriptsAreTheSuites(t *testing.T) {
	suite := filepath.Join("..", "..", "..", "..", "core", "storetest")
	theirs := funcSources(t, filepath.Join(suite, "windows.go"), filepath.Join(suite, "buckets.go"))
	ours := funcSources(t, "storetest_scripts_test.go")
	require.NotEmpty(t, theirs)
	for name, src := range theirs {
		assert.True(t, src == ours[name],
			"core/storetest's %s changed: copy it again into cmd/ratelimit/internal/sim/storetest_scripts_test.go", name)
	}
}

// funcSources returns the source text of every function declared in files,
// by name, from "func" to its closing brace.
func funcSources(t *testing.T, files ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, path := range files {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				out[fd.Name.Name] = string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
			}
		}
	}
	return out
}
