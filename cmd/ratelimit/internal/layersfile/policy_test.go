package layersfile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/layersfile"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// allAlgorithms is what an error about an algorithm lists.
const allAlgorithms = "fixed_window (fixed), sliding_window_log (log), sliding_window_counter (counter), token_bucket (token), leaky_bucket (leaky)"

func TestAlgorithm(t *testing.T) {
	assert.ElementsMatch(t, limits.Algorithms[core.Algorithm](), layersfile.Algorithms(), "every algorithm the library has")
	for name, want := range map[string]core.Algorithm{
		"fixed": core.FixedWindow, "fixed_window": core.FixedWindow,
		"log": core.SlidingWindowLog, "sliding_window_log": core.SlidingWindowLog,
		"counter": core.SlidingWindowCounter, "sliding_window_counter": core.SlidingWindowCounter,
		"token": core.TokenBucket, "token_bucket": core.TokenBucket, "Token_Bucket": core.TokenBucket,
		"leaky": core.LeakyBucket, "leaky_bucket": core.LeakyBucket,
	} {
		got, err := layersfile.Algorithm(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	_, err := layersfile.Algorithm("gcra")
	assert.EqualError(t, err, `unknown algorithm "gcra": want one of `+allAlgorithms)
	_, err = layersfile.Algorithm("")
	assert.EqualError(t, err, "missing: want one of "+allAlgorithms)
}

func TestSetPolicyField(t *testing.T) {
	var p core.Policy
	for _, f := range [][2]string{
		{"name", "login"}, {"algorithm", "log"}, {"limit", "5"}, {"window", "15m"}, {"burst", "7"},
		{"lockout", "30m"}, {"lockout_max", "24h"}, {"lockout_memory", "48h"}, {"fail_closed", "5s"}, {"lease", "2s"},
	} {
		require.NoError(t, layersfile.SetPolicyField(&p, f[0], f[1]), f[0])
	}
	assert.Equal(t, core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute, Burst: 7,
		Lockout: 30 * time.Minute, LockoutMax: 24 * time.Hour, LockoutMemory: 48 * time.Hour, FailClosed: 5 * time.Second, Lease: 2 * time.Second}, p)
	assert.Len(t, layersfile.PolicyFields, 10, "each field above")

	for _, c := range []struct{ field, text, err string }{
		{"limit", "x", `limit: "x" is not a whole number`},
		{"burst", "99999999999999999999", "burst: 99999999999999999999 is out of range"},
		{"window", "soon", `window: time: invalid duration "soon"`},
		{"algorithm", "gcra", `algorithm: unknown algorithm "gcra": want one of ` + allAlgorithms},
		{"colour", "red", `unknown field "colour" (want name, algorithm, limit, window, burst, lockout, lockout_max, lockout_memory, fail_closed, lease)`},
	} {
		assert.EqualError(t, layersfile.SetPolicyField(&p, c.field, c.text), c.err, c.field)
	}
}
