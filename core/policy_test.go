package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

func TestPolicyValidate(t *testing.T) {
	ok := core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}
	with := func(f func(p *core.Policy)) core.Policy {
		p := ok
		f(&p)
		return p
	}
	tests := []struct {
		name   string
		policy core.Policy
		reason string // "" means valid
	}{
		{"valid token bucket", ok, ""},
		{"valid with burst", with(func(p *core.Policy) { p.Burst = 50 }), ""},
		{"valid leaky with burst", with(func(p *core.Policy) { p.Algorithm = core.LeakyBucket; p.Burst = 3 }), ""},
		{"valid name", with(func(p *core.Policy) { p.Name = "login.v2_strict-1" }), ""},
		{"valid bounds", core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: limits.MaxWindow}, ""},
		{"valid min window", core.Policy{Algorithm: core.SlidingWindowCounter, Limit: 1, Window: limits.MinWindow}, ""},
		{"valid log at cap", core.Policy{Algorithm: core.SlidingWindowLog, Limit: limits.MaxLogLimit, Window: time.Hour}, ""},
		{"zero value", core.Policy{}, "limit 0"},
		{"default algorithm", core.Policy{Limit: 100, Window: time.Minute}, ""},
		{"default algorithm beyond a log's limit", core.Policy{Limit: limits.MaxLogLimit + 1, Window: time.Minute}, ""},
		{"burst on the default algorithm", core.Policy{Limit: 100, Window: time.Minute, Burst: 10}, "only, not sliding_window_counter"},
		{"unknown algorithm", with(func(p *core.Policy) { p.Algorithm = "gcra" }),
			`unknown algorithm "gcra" (one of fixed_window, sliding_window_log, sliding_window_counter, token_bucket, leaky_bucket; empty means sliding_window_counter)`},
		{"zero limit", with(func(p *core.Policy) { p.Limit = 0 }), "limit 0"},
		{"negative limit", with(func(p *core.Policy) { p.Limit = -5 }), "limit -5"},
		{"limit too big", with(func(p *core.Policy) { p.Limit = limits.MaxLimit + 1 }), "limit"},
		{"log limit too big", core.Policy{Algorithm: core.SlidingWindowLog, Limit: limits.MaxLogLimit + 1, Window: time.Hour}, "sliding_window_counter"},
		{"zero window", with(func(p *core.Policy) { p.Window = 0 }), "window 0s"},
		{"negative window", with(func(p *core.Policy) { p.Window = -time.Second }), "window -1s"},
		{"window under 1ms", with(func(p *core.Policy) { p.Window = 999 * time.Microsecond }), "window"},
		{"window over a year", with(func(p *core.Policy) { p.Window = limits.MaxWindow + time.Hour }), "window"},
		{"negative burst", with(func(p *core.Policy) { p.Burst = -1 }), "burst -1"},
		{"burst too big", with(func(p *core.Policy) { p.Burst = limits.MaxLimit + 1 }), "burst"},
		{"burst filling in a year", core.Policy{Algorithm: core.LeakyBucket, Limit: 1, Window: 24 * time.Hour, Burst: 366}, ""},
		{"burst at the bounds", core.Policy{Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: limits.MaxWindow, Burst: limits.MaxLimit}, ""},
		{"burst filling in over a year", core.Policy{Algorithm: core.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 367}, "to fill"},
		{"huge burst at a slow rate", core.Policy{Algorithm: core.TokenBucket, Limit: 1, Window: limits.MaxWindow, Burst: limits.MaxLimit}, "to fill"},
		{"burst on a window", core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: time.Second, Burst: 10}, "burst applies"},
		{"name with space", with(func(p *core.Policy) { p.Name = "a b" }), "character"},
		{"name with quote", with(func(p *core.Policy) { p.Name = `a"b` }), "character"},
		{"name with brace", with(func(p *core.Policy) { p.Name = "a{b}" }), "character"},
		{"name too long", with(func(p *core.Policy) { p.Name = strings.Repeat("n", limits.MaxNameLen+1) }), "name is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if tt.reason == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
}

func TestPolicyCapacityAndName(t *testing.T) {
	tests := []struct {
		p        core.Policy
		capacity int64
		name     string
	}{
		{core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second}, 10, "token_bucket-10-per-1s"},
		{core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 30}, 30, "token_bucket-10-per-1s-burst-30"},
		{core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Minute, Burst: 2}, 2, "leaky_bucket-10-per-1m0s-burst-2"},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 300, Window: time.Hour}, 300, "fixed_window-300-per-1h0m0s"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.capacity, limits.Capacity(tt.p.Algorithm, tt.p.Limit, tt.p.Burst), "Capacity of %+v", tt.p)
		name := limits.DefaultName(tt.p.Algorithm, tt.p.Limit, tt.p.Window, tt.p.Burst)
		assert.Equal(t, tt.name, name, "DefaultName of %+v", tt.p)
		named := tt.p
		named.Name = name
		assert.NoError(t, named.Validate(), "the default name %q must validate", name)
	}
}

func TestRequestValidate(t *testing.T) {
	ok := core.Request{Key: "k", Policy: core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}, Cost: 20}
	tests := []struct {
		name string
		edit func(r *core.Request)
		want error
	}{
		{"valid", func(*core.Request) {}, nil},
		{"empty key", func(r *core.Request) { r.Key = "" }, core.ErrInvalidOption},
		{"bad policy", func(r *core.Request) { r.Policy.Window = 0 }, core.ErrInvalidOption},
		{"empty algorithm", func(r *core.Request) { r.Policy.Algorithm, r.Policy.Burst, r.Cost = "", 0, 1 }, core.ErrInvalidOption},
		{"cost 0", func(r *core.Request) { r.Cost = 0 }, core.ErrInvalidOption},
		{"cost -1", func(r *core.Request) { r.Cost = -1 }, core.ErrInvalidOption},
		{"the capacity", func(r *core.Request) { r.Cost = 20 }, nil},
		{"cost above burst", func(r *core.Request) { r.Cost = 21 }, core.ErrInvalidOption},
	}
	for _, tt := range tests {
		r := ok
		tt.edit(&r)
		err := r.Validate()
		if tt.want == nil {
			assert.NoError(t, err, tt.name)
			continue
		}
		assert.ErrorIs(t, err, tt.want, tt.name)
	}
	// A Store gets a policy as the Limiter filled it in: the default
	// algorithm written out, never empty, though Policy.Validate takes it.
	r := core.Request{Key: "k", Policy: core.Policy{Name: "api", Limit: 10, Window: time.Second}, Cost: 1}
	require.NoError(t, r.Policy.Validate())
	assert.EqualError(t, r.Validate(), `ratelimit: invalid argument: policy "api" has an empty algorithm: a Store gets policies as the Limiter filled them in (Limiter.Policies), the default sliding_window_counter written out`)
}
