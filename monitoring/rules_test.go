package monitoring

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/internal/rules/outcome"
)

// rulesTestPath is the promtool unit test file of the rules.
const rulesTestPath = "prometheus/ratelimit-rules_test.yml"

// The names the rules must follow: level:metric:operations for recorded
// series, RateLimit... for alerts.
var (
	recordName = regexp.MustCompile(`^ratelimit:[a-z0-9_]+:[a-z0-9_]+$`)
	alertName  = regexp.MustCompile(`^RateLimit[A-Z][A-Za-z0-9]+$`)
)

// severities are the values an alert's severity label may take.
var severities = []string{"critical", "warning", "info"}

func loadRules(t *testing.T) *ruleFile {
	t.Helper()
	f, err := parseRules(rulesYAML)
	require.NoError(t, err)
	return f
}

func TestRulesFileIsEmbedded(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(rulesPath))
	require.NoError(t, err)
	assert.Equal(t, rulesYAML, string(b))
	inFiles, err := fs.ReadFile(Files, rulesPath)
	require.NoError(t, err)
	assert.Equal(t, b, inFiles, "Files has the rules as the source tree does")
}

func TestRuleExprs(t *testing.T) {
	rules, err := ruleExprs()
	require.NoError(t, err)
	f := loadRules(t)
	n := 0
	for _, g := range f.Groups {
		n += len(g.Rules)
	}
	require.Len(t, rules, n)

	names := map[string]bool{}
	alerts := 0
	for _, r := range rules {
		assert.False(t, names[r.Name], "%s twice", r.Name)
		names[r.Name] = true
		assert.NotEmpty(t, r.Group, r.Name)
		assert.NotEmpty(t, strings.TrimSpace(r.Expr), r.Name)
		if !r.IsAlert {
			assert.Regexp(t, recordName, r.Name)
			assert.Equal(t, r.Expr, r.Signal, r.Name)
			continue
		}
		alerts++
		assert.Regexp(t, alertName, r.Name)
		assert.NotEqual(t, r.Expr, r.Signal, r.Name)
		assert.Contains(t, r.Signal, " bool ", r.Name)
	}
	assert.Equal(t, 10, alerts)

	// The end-to-end test and the README rely on these alerts existing.
	for _, a := range []string{"RateLimitDenyRatioHigh", "RateLimitLockoutSurge", "RateLimitDenyListedSurge",
		"RateLimitNearLimitSurge", "RateLimitStoreErrors",
		"RateLimitFallbackActive", "RateLimitStoreLatencyHigh", "RateLimitStoreFailing",
		"RateLimitReputationBanSurge", "RateLimitReputationOutlier"} {
		assert.True(t, names[a], "no alert %s", a)
	}
}

func TestRuleFields(t *testing.T) {
	f := loadRules(t)
	for _, g := range f.Groups {
		assert.NotEmpty(t, g.Name)
		assert.NotEmpty(t, g.Rules, "group %s", g.Name)
		for _, r := range g.Rules {
			assert.True(t, (r.Record == "") != (r.Alert == ""), "a rule is a record or an alert: %+v", r)
			if r.Record != "" {
				assert.Empty(t, r.For, r.Record)
				assert.Empty(t, r.Annotations, r.Record)
				continue
			}
			d, err := time.ParseDuration(r.For)
			if assert.NoError(t, err, "%s: for", r.Alert) {
				assert.GreaterOrEqual(t, d, time.Minute, "%s: a for shorter than a scrape or two flaps", r.Alert)
			}
			assert.Contains(t, severities, r.Labels["severity"], "%s: severity", r.Alert)
			assert.Equal(t, []string{"severity"}, slices.Sorted(maps.Keys(r.Labels)), "%s: labels", r.Alert)
			assert.Equal(t, []string{"description", "summary"}, slices.Sorted(maps.Keys(r.Annotations)), "%s: annotations", r.Alert)
			for k, v := range r.Annotations {
				if g.Name == "ratelimit.reputation" {
					// A reputation's series have no limit: its alerts
					// say it is the reputation's.
					assert.Contains(t, v, "reputation", "%s: %s says it is the reputation's", r.Alert, k)
				} else {
					assert.Contains(t, v, "{{ $labels.limit }}", "%s: %s names the limit", r.Alert, k)
				}
				assert.NotContains(t, v, "\n", "%s: %s on one line", r.Alert, k)
			}
		}
	}
}

// TestRuleMetrics checks that every rule reads only the exporter's series
// and series recorded before it, with labels and values that exist.
func TestRuleMetrics(t *testing.T) {
	f := loadRules(t)
	recorded := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Record + r.Alert
			sels := selectors(t, r.Expr)
			assert.NotEmpty(t, sels, "%s selects nothing", name)
			for _, s := range sels {
				if recorded[s.metric] {
					continue
				}
				_, ok := exporterMetrics[s.metric]
				if assert.True(t, ok, "%s: %s is neither a metric of observe/prometheus nor recorded before", name, s.metric) {
					checkMatcherValues(t, s, name)
				}
			}
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
}

// outcomesOf returns the outcomes that the outcome matcher of a
// ratelimit_decisions_total selector selects, sorted; nil when it has
// none. Only = and =~ with alternatives of names are allowed: a negative
// matcher or a pattern would select outcomes added later unseen.
func outcomesOf(t *testing.T, s selector, where string) []string {
	t.Helper()
	var out []string
	for _, m := range matcher.FindAllStringSubmatch(s.matchers, -1) {
		if m[1] != "outcome" {
			continue
		}
		require.Contains(t, []string{"=", "=~"}, m[2], "%s: outcome%s: name the outcomes", where, m[2])
		require.Nil(t, out, "%s: two outcome matchers", where)
		out = strings.Split(m[3], "|")
		require.Regexp(t, `^[a-z_|]+$`, m[3], "%s: outcome=~%q: alternatives of names only", where, m[3])
	}
	slices.Sort(out)
	return out
}

// ruleOutcomes returns, for each recording rule with one
// ratelimit_decisions_total selector that picks outcomes, those outcomes.
func ruleOutcomes(t *testing.T) map[string][]string {
	t.Helper()
	sets := map[string][]string{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record == "" {
				continue
			}
			var found [][]string
			for _, s := range selectors(t, r.Expr) {
				if s.metric == "ratelimit_decisions_total" {
					found = append(found, outcomesOf(t, s, r.Record))
				}
			}
			if len(found) == 1 && found[0] != nil {
				sets[r.Record] = found[0]
			}
		}
	}
	return sets
}

// union returns the sorted union of sets.
func union(sets ...[]string) []string {
	var u []string
	for _, s := range sets {
		for _, o := range s {
			if !slices.Contains(u, o) {
				u = append(u, o)
			}
		}
	}
	slices.Sort(u)
	return u
}

// TestRuleOutcomes checks how the recording rules sort core's outcomes:
// every outcome in exactly one of admitted (by the limit's decision),
// shadow_denied, allow_listed, denied (by the limit), deny_listed, or none
// (failed_closed, canceled, invalid); the admitted ones together exactly
// those core's Outcome.Admitted admits; decided the limit's decisions.
func TestRuleOutcomes(t *testing.T) {
	sets := ruleOutcomes(t)
	set := func(name string) []string {
		t.Helper()
		s, ok := sets[name]
		require.True(t, ok, "no recording rule %s over outcomes", name)
		return s
	}
	admitted, denied, decided := set("ratelimit:admitted:rate5m"), set("ratelimit:denied:rate5m"), set("ratelimit:decided:rate5m")
	shadow, locked := set("ratelimit:shadow_denied:rate5m"), set("ratelimit:locked_out:rate5m")
	allowListed, denyListed := set("ratelimit:allow_listed:rate5m"), set("ratelimit:deny_listed:rate5m")
	neither := []string{outcome.Canceled.String(), outcome.FailedClosed.String(), outcome.Invalid.String()}

	assert.Equal(t, []string{"shadow_denied"}, shadow)
	assert.Equal(t, []string{"locked_out"}, locked)
	assert.Equal(t, []string{"allow_listed"}, allowListed)
	assert.Equal(t, []string{"deny_listed"}, denyListed)
	assert.Subset(t, denied, locked, "a lockout is the limit's denial")
	assert.Equal(t, union(admitted, shadow, denied), decided, "decided: what the limit decided")
	assert.Equal(t, []string{"fallback_allowed", "fallback_denied"}, set("ratelimit:fallback:rate5m"))

	classes := map[string][]string{"admitted": admitted, "shadow_denied": shadow, "allow_listed": allowListed,
		"denied": denied, "deny_listed": denyListed, "neither": neither}
	for _, o := range outcome.All() {
		var in []string
		for name, c := range classes {
			if slices.Contains(c, o.String()) {
				in = append(in, name)
			}
		}
		assert.Len(t, in, 1, "outcome %s is in %v: it must be in exactly one class", o, in)
		passed := slices.Contains(admitted, o.String()) || slices.Contains(shadow, o.String()) ||
			slices.Contains(allowListed, o.String())
		assert.Equal(t, o.Admitted(), passed, "outcome %s: admitted, shadow_denied or allow_listed exactly when core admits it", o)
	}
}

func TestSignal(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{in: `a > 0`, want: `a > bool 0`},
		{in: `(a > 0)`, want: `a > bool 0`},
		{in: `sum by (limit) (rate(x{o=~"a|b"}[5m])) >= 0.5`, want: `sum by (limit) (rate(x{o=~"a|b"}[5m])) >= bool 0.5`},
		{in: `a > on (limit) max by (limit) (b)`, want: `a > bool on (limit) max by (limit) (b)`},
		{in: `(a > 3 * b) and (a > 0.05)`, want: `(a > bool 3 * b) * (a > bool 0.05)`},
		{in: `(a != 1) and on (limit) (b < c)`, want: `(a != bool 1) * on (limit) (b < bool c)`},
		{in: `a == 1 and b <= 2 and c < 3`, want: `(a == bool 1) * (b <= bool 2) * (c < bool 3)`},
		{in: `(a) > (b)`, want: `(a) > bool (b)`},
		{in: `x{l="a>b",m!="c"} > 1`, want: `x{l="a>b",m!="c"} > bool 1`},
		{in: `a > 0 or b > 0`, err: `top-level "or"`},
		{in: `a unless b`, err: `top-level "unless"`},
		{in: `a + b`, err: "no top-level comparison"},
		{in: `a > b > c`, err: "more than one top-level comparison"},
		{in: `a > bool 0`, err: "a bool comparison already"},
		{in: `(a > 0) and`, err: "empty operand"},
		{in: `(a > 0) and on b`, err: "on without a label list"},
		{in: `(a > 0`, err: "unclosed"},
		{in: `a{l="x} > 0`, err: "unterminated string"},
	} {
		got, err := signal(c.in)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
}

// rulesTest is the part of a promtool unit test file this test reads.
type rulesTest struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string           `yaml:"eval_time"`
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromQLExprTest []struct {
			Expr       string           `yaml:"expr"`
			EvalTime   string           `yaml:"eval_time"`
			ExpSamples []map[string]any `yaml:"exp_samples"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// TestRulesTestCoverage checks that the promtool tests cover every rule:
// each alert fires in one case and stays silent in another, each recorded
// series and each alert's Signal is evaluated against expected samples.
// promtool itself runs them (TestPromtoolTestRules).
func TestRulesTestCoverage(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(rulesTestPath))
	require.NoError(t, err)
	var rt rulesTest
	require.NoError(t, yaml.Unmarshal(b, &rt))
	assert.Equal(t, []string{filepath.Base(rulesPath)}, rt.RuleFiles)

	firing, silent, exprs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
		for _, e := range tc.PromQLExprTest {
			assert.NotEmpty(t, e.ExpSamples, "%s at %s: expect samples (a test of nothing passes on nothing)", e.Expr, e.EvalTime)
			exprs[e.Expr] = true
		}
	}

	rules, err := ruleExprs()
	require.NoError(t, err)
	for _, r := range rules {
		if !r.IsAlert {
			assert.True(t, exprs[r.Name], "no promql_expr_test of %s", r.Name)
			continue
		}
		assert.True(t, firing[r.Name], "no test where %s fires", r.Name)
		assert.True(t, silent[r.Name], "no test where %s does not fire", r.Name)
		assert.True(t, exprs[r.Signal], "no promql_expr_test of %s's signal %q", r.Name, r.Signal)
	}
}
