package monitoring

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/rules/outcome"
)

// exporterMetrics are the series observe/prometheus exports under its
// default namespace, each with its labels.
var exporterMetrics = map[string][]string{
	"ratelimit_decisions_total":               {"limit", "outcome"},
	"ratelimit_near_limit_total":              {"limit"},
	"ratelimit_store_duration_seconds_bucket": {"limit", "le"},
	"ratelimit_store_duration_seconds_sum":    {"limit"},
	"ratelimit_store_duration_seconds_count":  {"limit"},
	"ratelimit_store_errors_total":            {"limit", "kind"},
	"ratelimit_store_health":                  {"limit", "state"},
	"ratelimit_memstore_keys":                 {"store"},
	"ratelimit_reputation_signals_total":      {"signal"},
	"ratelimit_reputation_bans_total":         {"band", "mode"},
	"ratelimit_reputation_clients":            {"band"},
	"ratelimit_reputation_score_max":          {},
	"ratelimit_reputation_score_mean":         {},
}

// labelValues are the values of the exporter's bounded labels: outcome
// and kind as core names them, state as promlimit does.
var labelValues = map[string][]string{
	"outcome": outcomeNames(),
	"kind":    {outcome.StoreErrTimeout, outcome.StoreErrCircuitOpen, outcome.StoreErrFailed},
	"state":   {"healthy", "recovering", "failing"},
	"signal":  {"denied", "locked_out", "deny_listed", "refused", "unrouted", "not_found", "reported"},
	"mode":    {"enforced", "shadow"},
}

// outcomeNames returns the String of every outcome.Outcome, in order.
func outcomeNames() []string {
	var names []string
	for _, o := range outcome.All() {
		names = append(names, o.String())
	}
	return names
}

// listKeywords are PromQL words followed by a parenthesized label list
// (optional after group_left and group_right).
var listKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// plainKeywords are PromQL words that are neither functions nor metrics.
var plainKeywords = map[string]bool{
	"group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// aggregationModifier matches what follows an aggregation's name when
// its grouping comes first: sum by (limit) (...).
var aggregationModifier = regexp.MustCompile(`^(by|without)\s*\(`)

// selector is one series selector of an expression: a metric name and
// the text between its braces, if any.
type selector struct {
	metric   string
	matchers string
}

// selectors returns the series selectors of a PromQL expression: the
// words that are not functions, aggregations, keywords or label names,
// with their matchers. It is a lexer, not a parser; promtool checks that
// the expressions parse.
func selectors(t *testing.T, expr string) []selector {
	t.Helper()
	var sels []selector
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			require.Less(t, j, len(expr), "unterminated string in %q", expr)
			i = j
		case c == '{' || c == '[':
			end := strings.IndexByte(expr[i:], map[byte]byte{'{': '}', '[': ']'}[c])
			require.GreaterOrEqual(t, end, 0, "unclosed %q in %q", c, expr)
			i += end
		case '0' <= c && c <= '9' || c == '.':
			j := i
			// a number, or a duration (offset 5m)
			for j < len(expr) && (isWordChar(expr[j]) || expr[j] == '.' ||
				((expr[j] == '-' || expr[j] == '+') && (expr[j-1] == 'e' || expr[j-1] == 'E'))) {
				j++
			}
			i = j - 1
		case isWordStart(c):
			j := i
			for j < len(expr) && isWordChar(expr[j]) {
				j++
			}
			word := expr[i:j]
			rest := strings.TrimLeft(expr[j:], " \t\n")
			i = j - 1
			switch {
			case listKeywords[word] && (strings.HasPrefix(rest, "(") || !strings.HasPrefix(word, "group_")):
				end := strings.IndexByte(rest, ')')
				require.True(t, strings.HasPrefix(rest, "(") && end > 0, "%s without a label list in %q", word, expr)
				i = len(expr) - len(rest) + end
			case plainKeywords[word]:
			case strings.HasPrefix(rest, "("), aggregationModifier.MatchString(rest):
				// a function or an aggregation
			default:
				s := selector{metric: word}
				if strings.HasPrefix(rest, "{") {
					end := strings.IndexByte(rest, '}')
					require.Greater(t, end, 0, "unclosed matchers in %q", expr)
					s.matchers = rest[1:end]
				}
				sels = append(sels, s)
			}
		}
	}
	return sels
}

func TestOutcomeNames(t *testing.T) {
	// The outcomes the rules and the dashboard are written for: a new one
	// must find its place in them (see TestRuleOutcomes).
	assert.Equal(t, []string{"allowed", "denied", "deny_cache", "fallback_allowed", "fallback_denied",
		"failed_open", "failed_closed", "canceled", "invalid",
		"shadow_denied", "locked_out", "allow_listed", "deny_listed"}, outcomeNames())
}

func TestSelectors(t *testing.T) {
	got := selectors(t, `histogram_quantile(0.99, sum by (le, limit) (rate(a_bucket{limit=~"x|y",le!="1e-3"}[5m]))) > on (limit) group_left max without (instance) (b) * 1e-3 and c:d:e offset 5m or -Inf < bool nan`)
	assert.Equal(t, []selector{
		{metric: "a_bucket", matchers: `limit=~"x|y",le!="1e-3"`},
		{metric: "b"},
		{metric: "c:d:e"},
	}, got)
}
