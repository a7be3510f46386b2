package gridtest

import (
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/overrides"
)

// Scales are the factors RunScales crosses the policies with: from none
// (1) to a millionth.
var Scales = []float64{1, 0.9, 0.5, 0.1, 0.01, 0.001, 1e-6}

// Scaler is a source that scales one client's policies by a factor, as a
// reputation band, the load signal or a plan of the user's does.
type Scaler struct {
	// Adjust is the policy source the Limiter consults.
	Adjust core.PolicySource
	// Scale makes Adjust scale key's policies by the factor from now on:
	// signals that take it into a band, a load reading.
	Scale func(t *testing.T, key string)
}

// ScaleConfig is one run of RunScales.
type ScaleConfig struct {
	// Store decides every case; each case has keys of its own.
	Store core.Store
	// NewScaler returns a fresh scaler by factor f for one case.
	NewScaler func(t *testing.T, f float64) Scaler
	// Every and MaxDrain are as in Config.
	Every    int
	MaxDrain time.Duration
}

// RunScales runs every policy of Policies (every algorithm, the
// extremes, the reputation issue's bucket of 3 a day with a burst of
// 800) by every factor of Scales, for a fresh client and for one that
// used all the configured policy allows before it was scaled. For each
// case it asserts, at explicit times, that no decision fails (none is
// made by the fail mode), that the policy in force is valid and no looser
// than the policy scaled as written (each value rounded down, at least 1,
// whether valid or not), and that the admitted cost never exceeds what
// that scaled policy allows.
func RunScales(t *testing.T, cfg ScaleConfig) {
	t.Helper()
	n, left := 0, 0
	defer func() {
		if left > 0 {
			t.Logf("%d cases left out: a usage that drains in more than %v at the scaled rate (see Config.MaxDrain)", left, cfg.MaxDrain)
		}
	}()
	for pi, p := range Policies() {
		for _, f := range Scales {
			for _, used := range []bool{false, true} {
				n++
				if cfg.Every > 1 && n%cfg.Every != 0 && p != Reputation {
					continue
				}
				c := scaleCase{policy: p, f: f, used: used, key: fmt.Sprintf("scale-%d-%v-%v", pi, f, used)}
				if cfg.MaxDrain > 0 && c.drain() > cfg.MaxDrain.Microseconds() {
					left++
					continue
				}
				t.Run(c.name(), func(t *testing.T) { c.run(t, cfg) })
			}
		}
	}
}

// Reputation is the reputation issue's policy: a token bucket of 3 a day
// with a burst of 800. Scaled by 0.5 as written, 1 a day with a burst of
// 400 takes 400 days to fill: invalid.
var Reputation = core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 3, Window: 24 * time.Hour, Burst: 800}

type scaleCase struct {
	policy core.Policy
	f      float64
	used   bool // the client used the configured policy before it was scaled
	key    string
}

func (c scaleCase) name() string {
	v := "fresh"
	if c.used {
		v = "used"
	}
	p := c.policy
	return fmt.Sprintf("%s/%s/scale%v/%s", p.Algorithm, limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst), c.f, v)
}

// drain is how long, in microseconds, a full bucket of the configured
// policy takes to drain at the scaled rate, in the used cases of the
// buckets; else 0.
func (c scaleCase) drain() int64 {
	if !c.used || !limits.IsBucket(c.policy.Algorithm) {
		return 0
	}
	carried := limits.Capacity(c.policy.Algorithm, c.policy.Limit, c.policy.Burst)
	d := new(big.Int).Mul(big.NewInt(carried), big.NewInt(c.policy.Window.Microseconds()))
	d.Quo(d, big.NewInt(literal(c.policy, overrides.Override{}, c.f).Limit))
	if !d.IsInt64() {
		return math.MaxInt64
	}
	return d.Int64()
}

func (c scaleCase) run(t *testing.T, cfg ScaleConfig) {
	sc := cfg.NewScaler(t, c.f)
	l, err := core.NewLimiter(cfg.Store, []core.Policy{c.policy}, core.WithPolicySource(sc.Adjust))
	require.NoError(t, err)
	p := c.policy
	if c.used {
		// The client takes all the configured policy allows, then is scaled.
		g := greedy(t, l, c.key, t0, limits.Capacity(p.Algorithm, p.Limit, p.Burst))
		noLooser(t, g.in, p, true, "before the scale")
	}
	sc.Scale(t, c.key)
	lit := literal(p, overrides.Override{}, c.f)
	w := p.Window
	var admitted int64
	var first, last time.Time
	var in core.Policy
	for i, at := range []time.Duration{0, w / 3, w / 2, w, w + w/2, 2*w + time.Microsecond, 5 * w} {
		now := t0.Add(at)
		g := greedy(t, l, c.key, now, max(limits.Capacity(p.Algorithm, p.Limit, p.Burst), limits.Capacity(lit.Algorithm, lit.Limit, lit.Burst)))
		if i == 0 {
			first, in = now, g.in
			noLooser(t, in, lit, false, "the scaled policy in force")
		} else {
			assert.Equal(t, in, g.in, "one policy in force for the whole case")
		}
		last = now
		admitted += g.admitted
	}
	allow := allowance(lit, first, last)
	assert.LessOrEqual(t, admitted, allow, "admitted %d, more than %s, the policy scaled as written, allows (%d) from %v to %v (in force: %s)",
		admitted, limits.DefaultName(lit.Algorithm, lit.Limit, lit.Window, lit.Burst), allow, first, last, limits.DefaultName(in.Algorithm, in.Limit, in.Window, in.Burst))
}
