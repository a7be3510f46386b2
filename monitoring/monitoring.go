// Package monitoring holds the Grafana dashboard and the Prometheus rules
// (recording rules and alerts) for the metrics of observe/prometheus
// (package promlimit) under its default namespace, "ratelimit":
//
//	grafana/ratelimit.json               the dashboard: import it, or provision it
//	prometheus/ratelimit-rules.yml       the rules: list it in rule_files
//	prometheus/ratelimit-rules_test.yml  their unit tests: promtool test rules
//
// The files are the product; this package only embeds them (Files), for
// tools that load them. Its tests keep the
// dashboard valid, run promtool, and run every PromQL expression of both
// files against a real Prometheus.
package monitoring

import (
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Files holds the dashboard, grafana/ratelimit.json, and the rules,
// prometheus/ratelimit-rules.yml, as this module ships them: read one with
// fs.ReadFile, or write it out where Grafana or Prometheus loads files.
//
//go:embed grafana/ratelimit.json prometheus/ratelimit-rules.yml
var Files embed.FS

//go:embed grafana/ratelimit.json
var dashboardJSON string

//go:embed prometheus/ratelimit-rules.yml
var rulesYAML string

// The files' paths in Files.
const (
	dashboardPath = "grafana/ratelimit.json"
	rulesPath     = "prometheus/ratelimit-rules.yml"
)

// The values dashboardExprs gives the dashboard's variables.
const (
	// exprLimit stands for $limit: every limit (the variable's All).
	exprLimit = ".+"
	// exprRateInterval stands for $__rate_interval: one minute, four
	// scrapes at a 15s scrape interval.
	exprRateInterval = "1m"
)

// exprVars are the values dashboardExprs gives the variables a panel's
// query may use.
func exprVars() map[string]string {
	return map[string]string{
		"limit":           exprLimit,
		"__rate_interval": exprRateInterval,
		"__interval":      "15s",
		"__interval_ms":   "15000",
		"__range":         "1h",
		"__range_s":       "3600",
		"__range_ms":      "3600000",
	}
}

// variableRef matches a Grafana variable in a query: ${name}, ${name:format},
// [[name]], [[name:format]] or $name.
var variableRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)`)

// dashboardExprs returns the PromQL expression of every query of every
// panel of the dashboard, in panel order, with the dashboard's variables
// given concrete values: $limit is exprLimit (every limit), $__rate_interval
// is exprRateInterval, $__interval 15s, $__range 1h. Each is a query that
// Prometheus can run as it is (GET /api/v1/query). It fails when the JSON
// does not decode, or a query is empty or uses another variable.
func dashboardExprs() ([]string, error) {
	d, err := parseDashboard(dashboardJSON)
	if err != nil {
		return nil, err
	}
	vars := exprVars()
	var exprs []string
	for _, p := range d.allPanels() {
		for _, t := range p.Targets {
			if strings.TrimSpace(t.Expr) == "" {
				return nil, fmt.Errorf("monitoring: panel %d (%q) query %s: empty expr", p.ID, p.Title, t.RefID)
			}
			e, err := expandVars(t.Expr, vars)
			if err != nil {
				return nil, fmt.Errorf("monitoring: panel %d (%q) query %s: %w", p.ID, p.Title, t.RefID, err)
			}
			exprs = append(exprs, e)
		}
	}
	return exprs, nil
}

// expandVars replaces each Grafana variable in expr with its value in
// vars, and fails on a variable vars does not have.
func expandVars(expr string, vars map[string]string) (string, error) {
	var unknown []string
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, ref)
			return ref
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variable %s in %q", strings.Join(unknown, ", "), expr)
	}
	return out, nil
}

// dashboard is the part of Grafana's dashboard model that this package and
// its tests read.
type dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	SchemaVersion int        `json:"schemaVersion"`
	Templating    templating `json:"templating"`
	Panels        []panel    `json:"panels"`
}

type templating struct {
	List []variable `json:"list"`
}

// variable is a dashboard variable; Query is a string, or an object with
// a "query" field (a Prometheus query variable in Grafana 10 and later).
type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasource     `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    gridPos     `json:"gridPos"`
	Targets    []target    `json:"targets"`
	// Panels are a collapsed row's panels.
	Panels    []panel `json:"panels"`
	Collapsed bool    `json:"collapsed"`
}

type target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *datasource `json:"datasource"`
}

// parseDashboard decodes the dashboard's JSON.
func parseDashboard(src string) (*dashboard, error) {
	var d dashboard
	if err := json.Unmarshal([]byte(src), &d); err != nil {
		return nil, fmt.Errorf("monitoring: %s: %w", dashboardPath, err)
	}
	return &d, nil
}

// allPanels returns the dashboard's panels, those of collapsed rows
// included, rows themselves included, in order.
func (d *dashboard) allPanels() []panel {
	var all []panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	return all
}

// ruleExpr is one rule of the rules file, as ruleExprs lists it.
type ruleExpr struct {
	// Group is the name of the rule's group.
	Group string
	// Name is the recorded metric's name (record) or the alert's (alert).
	Name string
	// Expr is the rule's expression as the file has it.
	Expr string
	// Signal is an expression that returns a sample for every series the
	// rule considers, whether or not an alert fires: for a recording rule,
	// Expr itself; for an alert, Expr with its comparisons made bool (0 or
	// 1) and its `and` made a product, so that it is 1 exactly where the
	// alert's condition holds and 0 where it does not (a NaN operand, such
	// as a quantile of nothing, gives 0). It refers to recorded series:
	// Prometheus must have loaded the rules and evaluated them once.
	Signal string
	// IsAlert reports whether the rule is an alert.
	IsAlert bool
}

// ruleExprs returns every rule of the rules file, in file order, with its
// Signal. An alert's Expr has one of two shapes, which the tests of this
// package enforce:
//
//	A op B                    -> Signal: A op bool B
//	(A op B) and (C op D) ... -> Signal: (A op bool B) * (C op bool D) ...
//
// where op is a comparison (==, !=, >, <, >=, <=) and A, B, C, D have no
// comparison, `and`, `or` or `unless` outside parentheses; an `and` may
// carry on(...) or ignoring(...), which the product keeps. A test that
// runs Signal and finds a 1 where the alert should fire, and a series at
// all where it should not, has checked the expression against real data.
// ruleExprs fails when the file does not decode or an alert's expression
// has another shape.
func ruleExprs() ([]ruleExpr, error) {
	f, err := parseRules(rulesYAML)
	if err != nil {
		return nil, err
	}
	var rules []ruleExpr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			rule := ruleExpr{Group: g.Name, Name: r.Record, Expr: r.Expr, Signal: r.Expr}
			if r.Alert != "" {
				rule.Name, rule.IsAlert = r.Alert, true
				if rule.Signal, err = signal(r.Expr); err != nil {
					return nil, fmt.Errorf("monitoring: alert %s: %w", r.Alert, err)
				}
			}
			rules = append(rules, rule)
		}
	}
	return rules, nil
}

// ruleFile is a Prometheus rules file.
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string     `yaml:"name"`
	Interval string     `yaml:"interval,omitempty"`
	Rules    []ruleSpec `yaml:"rules"`
}

type ruleSpec struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// parseRules decodes a rules file, refusing unknown fields.
func parseRules(src string) (*ruleFile, error) {
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("monitoring: %s: %w", rulesPath, err)
	}
	return &f, nil
}
