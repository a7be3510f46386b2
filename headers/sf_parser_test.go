package headers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/internal/testkit/npmtest"
)

// TestStructuredFieldsIndependentParser parses the RateLimit and
// RateLimit-Policy fields the Writer writes (draft 10's syntax) with an
// independent Structured Field Values parser, the npm structured-headers
// package: single and layered limits, admitted and denied, names that
// need no escaping and ones at the edge of what a String holds, and
// checks every member (a String name; r, t, q and w Integers) against the
// decisions written.
func TestStructuredFieldsIndependentParser(t *testing.T) {
	p := func(name string, alg core.Algorithm, limit int64, window time.Duration) core.Policy {
		return core.Policy{Name: name, Algorithm: alg, Limit: limit, Window: window}
	}
	global := p("global", core.TokenBucket, 1_000_000, time.Hour)
	user := p("user.v2_tier-1", core.FixedWindow, 100, time.Minute)
	login := p("login", core.SlidingWindowLog, 5, 15*time.Minute)
	cases := []struct {
		name   string
		d      core.Decision
		layers []core.Decision
	}{
		{"single/allowed", core.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 1001 * time.Millisecond, Policy: user}, nil},
		{"single/denied", core.Decision{Limit: 5, ResetAfter: 14 * time.Minute, RetryAfter: 90 * time.Second, Policy: login}, nil},
		{"single/huge", core.Decision{Allowed: true, Limit: 1_000_000, Remaining: 999_999, ResetAfter: time.Hour, Policy: global}, nil},
		{"layers/allowed", core.Decision{Allowed: true, Limit: 100, Remaining: 3, ResetAfter: 40 * time.Second, Policy: user}, []core.Decision{
			{Allowed: true, Limit: 1_000_000, Remaining: 999_000, ResetAfter: 4 * time.Second, Policy: global},
			{Allowed: true, Limit: 100, Remaining: 3, ResetAfter: 40 * time.Second, Policy: user},
		}},
		{"layers/denied", core.Decision{Limit: 5, ResetAfter: 14 * time.Minute, RetryAfter: 10 * time.Minute, Policy: login}, []core.Decision{
			{Allowed: true, Limit: 1_000_000, Remaining: 999_001, ResetAfter: 4 * time.Second, Policy: global},
			{Allowed: true, Limit: 100, Remaining: 4, ResetAfter: 40 * time.Second, Policy: user},
			{Limit: 5, ResetAfter: 14 * time.Minute, RetryAfter: 10 * time.Minute, Policy: login},
		}},
	}
	w := headers.NewWriter(headers.Config{Structured: true, RetryAfter: true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			w.Write(h, tc.d, tc.layers, time.Time{})
			rl, err := npmtest.ParseSFList(t, h.Values("RateLimit"))
			require.NoError(t, err)
			pol, err := npmtest.ParseSFList(t, h.Values("RateLimit-Policy"))
			require.NoError(t, err)
			want := tc.layers
			if want == nil {
				want = []core.Decision{tc.d}
			}
			require.Len(t, rl, len(want))
			require.Len(t, pol, len(want))
			seen := map[string]bool{}
			for i := range rl {
				name, ok := rl[i].Value.(string)
				require.True(t, ok && !rl[i].Token, "member %d of RateLimit is a String: %+v", i, rl[i])
				var d *core.Decision
				for j := range want {
					if want[j].Policy.Name == name {
						d = &want[j]
					}
				}
				require.NotNil(t, d, "RateLimit names %q, a layer written", name)
				seen[name] = true
				assert.Equal(t, map[string]any{"r": float64(d.Remaining), "t": float64(int64((d.ResetAfter + time.Second - 1) / time.Second))}, rl[i].Params, name)
				assert.Equal(t, name, pol[i].Value, "RateLimit-Policy in the same order")
				assert.Equal(t, map[string]any{"q": float64(d.Policy.Limit), "w": d.Policy.Window.Seconds()}, pol[i].Params, name)
			}
			assert.Len(t, seen, len(want), "every layer once")
			assert.Equal(t, tc.d.Policy.Name, rl[0].Value, "the binding layer first")
		})
	}
}
