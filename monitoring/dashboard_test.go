package monitoring

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requiredPanels are the titles the dashboard must keep: what issue #10
// asks an operator can see, and shadow mode, lockouts and lists (#9).
var requiredPanels = []string{
	"Admitted requests per limit",
	"Denied requests per limit",
	"Deny ratio per limit",
	"Decisions by outcome",
	"Near-limit admissions per limit",
	"Store latency p50/p90/p99",
	"Store errors by kind",
	"Would-be denials per limit (shadow mode)",
	"Would-be deny ratio per limit (shadow mode)",
	"Lockouts per limit",
	"Allow- and deny-listed requests per limit",
	"Deny-listed share of requests",
	"Fallback and fail-mode decisions",
	"Store health",
	"Deny-cache hits",
	"Denials answered by the deny cache",
	"Memory store keys",
}

// panelTypes are the panel types the dashboard may use.
var panelTypes = []string{"row", "timeseries", "stat"}

// datasourceRef is the data source every panel and query must name: the
// dashboard's datasource variable.
var datasourceRef = datasource{Type: "prometheus", UID: "${datasource}"}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	d, err := parseDashboard(dashboardJSON)
	require.NoError(t, err)
	return d
}

func TestDashboardFileIsEmbedded(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(dashboardPath))
	require.NoError(t, err)
	assert.Equal(t, dashboardJSON, string(b))
	assert.True(t, json.Valid(b))
	inFiles, err := fs.ReadFile(Files, dashboardPath)
	require.NoError(t, err)
	assert.Equal(t, b, inFiles, "Files has the dashboard as the source tree does")
}

func TestDashboardHeader(t *testing.T) {
	d := loadDashboard(t)
	assert.Equal(t, 39, d.SchemaVersion)
	assert.NotEmpty(t, d.UID)
	assert.LessOrEqual(t, len(d.UID), 40, "Grafana's uid limit")
	assert.NotEmpty(t, d.Title)

	// Every top-level field Grafana writes on export is there, so that an
	// import does not migrate or guess.
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(dashboardJSON), &raw))
	for _, k := range []string{"annotations", "editable", "panels", "refresh", "schemaVersion",
		"tags", "templating", "time", "timepicker", "timezone", "title", "uid", "version"} {
		assert.Contains(t, raw, k)
	}
	assert.NotContains(t, raw, "id", "an exported dashboard has no numeric id")
	assert.NotContains(t, raw, "__inputs", "the datasource variable replaces import-time inputs")
}

func TestDashboardVariables(t *testing.T) {
	d := loadDashboard(t)
	require.Len(t, d.Templating.List, 2)
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}

	ds, ok := vars["datasource"]
	require.True(t, ok, "a datasource variable")
	assert.Equal(t, "datasource", ds.Type)
	assert.JSONEq(t, `"prometheus"`, string(ds.Query))

	lim, ok := vars["limit"]
	require.True(t, ok, "a limit variable")
	assert.Equal(t, "query", lim.Type)
	require.NotNil(t, lim.Datasource)
	assert.Equal(t, datasourceRef, *lim.Datasource)
	assert.True(t, lim.Multi)
	assert.True(t, lim.IncludeAll)
	const query = "label_values(ratelimit_decisions_total, limit)"
	assert.Equal(t, query, lim.Definition)
	var q struct {
		Query string `json:"query"`
		RefID string `json:"refId"`
	}
	require.NoError(t, json.Unmarshal(lim.Query, &q))
	assert.Equal(t, query, q.Query)
	assert.NotEmpty(t, q.RefID)
}

func TestDashboardPanels(t *testing.T) {
	d := loadDashboard(t)
	ids := map[int]string{}
	titles := map[string]bool{}
	for _, p := range d.allPanels() {
		assert.Positive(t, p.ID, "panel %q", p.Title)
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d of %q already taken by %q", p.ID, p.Title, prev)
		}
		ids[p.ID] = p.Title
		assert.NotEmpty(t, p.Title, "panel %d", p.ID)
		assert.False(t, titles[p.Title], "two panels titled %q", p.Title)
		titles[p.Title] = true
		assert.Contains(t, panelTypes, p.Type, "panel %q", p.Title)

		g := p.GridPos
		assert.Positive(t, g.H, "panel %q height", p.Title)
		assert.Positive(t, g.W, "panel %q width", p.Title)
		assert.GreaterOrEqual(t, g.X, 0, "panel %q", p.Title)
		assert.GreaterOrEqual(t, g.Y, 0, "panel %q", p.Title)
		assert.LessOrEqual(t, g.X+g.W, 24, "panel %q past the 24 columns", p.Title)

		if p.Type == "row" {
			assert.Empty(t, p.Targets, "row %q", p.Title)
			assert.Equal(t, 24, g.W, "row %q", p.Title)
			assert.Equal(t, 1, g.H, "row %q", p.Title)
			continue
		}
		if assert.NotNil(t, p.Datasource, "panel %q has no datasource", p.Title) {
			assert.Equal(t, datasourceRef, *p.Datasource, "panel %q", p.Title)
		}
		assert.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			assert.Regexp(t, `^[A-Z]$`, tg.RefID, "panel %q", p.Title)
			assert.False(t, refs[tg.RefID], "panel %q: refId %s twice", p.Title, tg.RefID)
			refs[tg.RefID] = true
			assert.NotEmpty(t, strings.TrimSpace(tg.Expr), "panel %q query %s", p.Title, tg.RefID)
			if assert.NotNil(t, tg.Datasource, "panel %q query %s", p.Title, tg.RefID) {
				assert.Equal(t, datasourceRef, *tg.Datasource, "panel %q query %s", p.Title, tg.RefID)
			}
			if len(p.Targets) > 1 || p.Type == "timeseries" {
				assert.NotEmpty(t, tg.LegendFormat, "panel %q query %s: a legend names its series", p.Title, tg.RefID)
			}
		}
	}
	for _, title := range requiredPanels {
		assert.True(t, titles[title], "no panel titled %q", title)
	}
}

func TestDashboardLayoutDoesNotOverlap(t *testing.T) {
	d := loadDashboard(t)
	// The top level (rows included) is one grid; a collapsed row's panels
	// are another, shown when it opens.
	grids := [][]panel{d.Panels}
	for _, p := range d.Panels {
		if len(p.Panels) > 0 {
			assert.True(t, p.Collapsed, "row %q holds panels but is not collapsed", p.Title)
			grids = append(grids, p.Panels)
		}
	}
	for _, grid := range grids {
		for i, a := range grid {
			for _, b := range grid[i+1:] {
				ga, gb := a.GridPos, b.GridPos
				overlap := ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H
				assert.False(t, overlap, "panels %q %+v and %q %+v overlap", a.Title, ga, b.Title, gb)
			}
		}
	}
}

func TestDashboardMetrics(t *testing.T) {
	d := loadDashboard(t)
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			sels := selectors(t, tg.Expr)
			assert.NotEmpty(t, sels, "panel %q query %s selects nothing", p.Title, tg.RefID)
			for _, s := range sels {
				labels, ok := exporterMetrics[s.metric]
				if !assert.True(t, ok, "panel %q query %s: %s is not a metric of observe/prometheus", p.Title, tg.RefID, s.metric) {
					continue
				}
				// The limit variable applies to every series that has a limit.
				if slices.Contains(labels, "limit") {
					assert.Contains(t, s.matchers, `limit=~"$limit"`, "panel %q query %s: %s ignores $limit", p.Title, tg.RefID, s.metric)
				}
				checkMatcherValues(t, s, "panel "+p.Title)
			}
		}
	}
}

// matcher is one label matcher: name, operator, value.
var matcher = regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)

// checkMatcherValues checks that s matches only labels its metric has and,
// for a bounded label, only values the exporter writes.
func checkMatcherValues(t *testing.T, s selector, where string) {
	t.Helper()
	for _, m := range matcher.FindAllStringSubmatch(s.matchers, -1) {
		name, value := m[1], m[3]
		assert.Contains(t, exporterMetrics[s.metric], name, "%s: %s has no label %s", where, s.metric, name)
		known, bounded := labelValues[name]
		if !bounded {
			continue
		}
		for _, v := range strings.Split(value, "|") {
			assert.Contains(t, known, v, "%s: %s=%q: no such %s", where, s.metric, value, name)
		}
	}
}

// TestDashboardOutcomes checks that the dashboard sorts outcomes as the
// rules do: every set of outcomes a query selects is the set of a
// recording rule (admitted, denied, decided, ...), one outcome, or the
// fallback and fail-mode panel's; and the admitted, denied and deny-ratio
// panels show exactly the rules' series.
func TestDashboardOutcomes(t *testing.T) {
	rules := ruleOutcomes(t)
	known := map[string]string{} // outcome set -> where it comes from
	for name, set := range rules {
		known[strings.Join(set, "|")] = name
	}
	known["failed_closed|failed_open|fallback_allowed|fallback_denied"] = "the fallback and fail-mode panel"

	queries := map[string][]string{} // panel title and refId -> the outcome sets, in order
	for _, p := range loadDashboard(t).allPanels() {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
			for _, s := range selectors(t, tg.Expr) {
				if s.metric != "ratelimit_decisions_total" {
					continue
				}
				set := outcomesOf(t, s, where)
				if set == nil {
					queries[p.Title+"/"+tg.RefID] = append(queries[p.Title+"/"+tg.RefID], "*")
					continue
				}
				key := strings.Join(set, "|")
				_, ok := known[key]
				assert.True(t, ok || len(set) == 1, "%s: outcomes %s are no rule's set", where, key)
				queries[p.Title+"/"+tg.RefID] = append(queries[p.Title+"/"+tg.RefID], key)
			}
		}
	}
	set := func(rule string) string {
		t.Helper()
		require.Contains(t, rules, rule)
		return strings.Join(rules[rule], "|")
	}
	admitted, denied, decided := set("ratelimit:admitted:rate5m"), set("ratelimit:denied:rate5m"), set("ratelimit:decided:rate5m")
	for q, want := range map[string][]string{
		"Admitted requests/s/A":                         {admitted},
		"Denied requests/s/A":                           {denied},
		"Deny ratio/A":                                  {denied, decided},
		"Admitted requests per limit/A":                 {admitted},
		"Admitted requests per limit/B":                 {"shadow_denied"},
		"Admitted requests per limit/C":                 {"allow_listed"},
		"Denied requests per limit/A":                   {denied},
		"Denied requests per limit/B":                   {"failed_closed"},
		"Denied requests per limit/C":                   {"deny_listed"},
		"Deny ratio per limit/A":                        {denied, decided},
		"Near-limit share of admissions/A":              {admitted},
		"Would-be denials per limit (shadow mode)/A":    {"shadow_denied"},
		"Would-be deny ratio per limit (shadow mode)/A": {"shadow_denied", decided},
		"Lockouts per limit/A":                          {"locked_out"},
		"Allow- and deny-listed requests per limit/A":   {"allow_listed"},
		"Allow- and deny-listed requests per limit/B":   {"deny_listed"},
		"Deny-listed share of requests/A":               {"deny_listed", "*"},
		"Denials answered by the deny cache/A":          {"deny_cache", denied},
	} {
		assert.Equal(t, want, queries[q], "%s: the outcomes it selects", q)
	}
}

func TestDashboardExprs(t *testing.T) {
	exprs, err := dashboardExprs()
	require.NoError(t, err)
	n := 0
	for _, p := range loadDashboard(t).allPanels() {
		n += len(p.Targets)
	}
	assert.Len(t, exprs, n, "one expression per query")
	for _, e := range exprs {
		assert.NotContains(t, e, "$", "a variable left in %q", e)
		assert.NotContains(t, e, "[[", "a variable left in %q", e)
	}
	assert.Contains(t, exprs,
		`histogram_quantile(0.99, sum by (le, limit) (rate(ratelimit_store_duration_seconds_bucket{limit=~".+"}[1m])))`)
}

func TestExpandVars(t *testing.T) {
	vars := exprVars()
	for _, c := range []struct{ in, want, err string }{
		{in: `rate(x{limit=~"$limit"}[$__rate_interval])`, want: `rate(x{limit=~".+"}[1m])`},
		{in: `rate(x{limit=~"${limit}"}[${__rate_interval}])`, want: `rate(x{limit=~".+"}[1m])`},
		{in: `x{limit=~"${limit:regex}"} offset $__interval`, want: `x{limit=~".+"} offset 15s`},
		{in: `x{limit=~"[[limit]]"}[$__range]`, want: `x{limit=~".+"}[1h]`},
		{in: `x{job="$job"}`, err: "unknown variable $job"},
		{in: `x{job="${job:csv}"}`, err: "unknown variable ${job:csv}"},
	} {
		got, err := expandVars(c.in, vars)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
	}
}
