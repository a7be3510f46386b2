package monitoring

// Exported to the tests of package monitoring_test, which run the
// expressions against a real Prometheus.
var (
	DashboardExprs = dashboardExprs
	RuleExprs      = ruleExprs
)

// Rule is ruleExpr, for the tests.
type Rule = ruleExpr

// The values dashboardExprs gives the dashboard's variables.
const (
	ExprLimit        = exprLimit
	ExprRateInterval = exprRateInterval
)
