package storecasetest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/storecasetest"
)

// TestCases: every algorithm has cases, each of a valid policy of that
// algorithm, named once, with steps; Cases is Of of each algorithm in
// turn, and what it returns is the caller's.
func TestCases(t *testing.T) {
	var want []string
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		cases := storecasetest.Of(alg)
		require.NotEmpty(t, cases, alg)
		named := map[string]bool{}
		for _, c := range cases {
			assert.Equal(t, alg, c.Policy.Algorithm, c.Name)
			assert.NoError(t, c.Policy.Validate(), c.Name)
			assert.False(t, named[c.Name], "%s/%s twice", alg, c.Name)
			named[c.Name] = true
			assert.NotEmpty(t, c.Steps, c.Name)
			want = append(want, string(alg)+"/"+c.Name)
		}
	}
	all := storecasetest.Cases()
	var got []string
	for _, c := range all {
		got = append(got, string(c.Policy.Algorithm)+"/"+c.Name)
	}
	assert.Equal(t, want, got)
	assert.Nil(t, storecasetest.Of("no-such-algorithm"))

	all[0].Steps[0].At = -1
	assert.NotEqual(t, all[0].Steps[0].At, storecasetest.Cases()[0].Steps[0].At, "the caller owns the cases")
}
