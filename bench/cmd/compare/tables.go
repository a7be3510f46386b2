package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// column is one library in a table.
type column struct{ lib, title string }

// row is one case in a table.
type row struct{ kase, title string }

// table is one Markdown table: a row per case, a column per library, and
// the ratio of ours to the best peer in that row.
type table struct {
	title, note string
	bench       string // top-level benchmark: "Redis", "Memory", ...
	rows        []row
	cols        []column
	peers       []string // the libraries the ratio compares ours with
	unit        string   // the metric compared
	lowerBetter bool
	// format writes a cell from the library's result (nil: the default,
	// the unit's value alone).
	format func(t *table, rs results, kase, lib string, res result) string
	// footnotes are printed under the table.
	footnotes []string
}

// render writes t from rs. A case a library was not measured in shows n/a.
func (t *table) render(w io.Writer, rs results) {
	fmt.Fprintf(w, "#### %s\n\n", t.title)
	if t.note != "" {
		fmt.Fprintf(w, "%s\n\n", t.note)
	}
	better := "higher is better"
	if t.lowerBetter {
		better = "lower is better"
	}
	head := []string{"case"}
	for _, c := range t.cols {
		head = append(head, c.title)
	}
	head = append(head, "ours ÷ best peer")
	fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
	for _, r := range t.rows {
		cells := []string{r.title}
		for _, c := range t.cols {
			res, ok := rs[t.bench][r.kase][c.lib]
			if !ok || !has(res, t.unit) {
				cells = append(cells, "n/a")
				continue
			}
			cell := ""
			if t.format != nil {
				cell = t.format(t, rs, r.kase, c.lib, res)
			} else {
				cell = number(res[t.unit])
			}
			if e := res["err%"]; e > 0 {
				cell += fmt.Sprintf(" (%s%% errors)", number(e))
			}
			cells = append(cells, cell)
		}
		cells = append(cells, t.ratio(rs, r.kase))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\nThe ratio is ours ÷ the best peer's %s (%s).\n", t.unit, better)
	for _, f := range t.footnotes {
		fmt.Fprintf(w, "%s\n", f)
	}
	fmt.Fprintln(w)
}

// ratio is ours ÷ the best peer that was measured in kase without errors.
func (t *table) ratio(rs results, kase string) string {
	ours, ok := rs[t.bench][kase]["ours"]
	if !ok || !has(ours, t.unit) {
		return "n/a"
	}
	best, found := 0.0, false
	for _, p := range t.peers {
		res, ok := rs[t.bench][kase][p]
		if !ok || !has(res, t.unit) || res["err%"] > 0 {
			continue
		}
		v := res[t.unit]
		if !found || (t.lowerBetter && v < best) || (!t.lowerBetter && v > best) {
			best, found = v, true
		}
	}
	switch {
	case !found:
		return "n/a"
	case best == 0 && ours[t.unit] == 0:
		return "1.00"
	case best == 0:
		return "n/a (a peer's is 0)"
	}
	return strconv.FormatFloat(ours[t.unit]/best, 'f', 2, 64)
}

func has(res result, unit string) bool {
	_, ok := res[unit]
	return ok
}

// number formats v with thousands separators and a precision fitting its
// size: 1,234,567 · 1,235 · 12.3 · 1.23 · 0.123.
func number(v float64) string {
	switch a := math.Abs(v); {
	case v == math.Trunc(v) && a < 1e15:
		return group(strconv.FormatFloat(v, 'f', 0, 64))
	case a >= 1000:
		return group(strconv.FormatFloat(v, 'f', 0, 64))
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1 || a == 0:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// group puts a comma every three digits of an integer's text.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Formats shared by the tables.

func withUnit(suffix string) func(*table, results, string, string, result) string {
	return func(t *table, _ results, _, _ string, res result) string { return number(res[t.unit]) + suffix }
}

func allocs(_ *table, _ results, _, _ string, res result) string {
	return fmt.Sprintf("%s allocs, %s B", number(res["allocs/op"]), number(res["B/op"]))
}

// overBare is allocs/op, with how many more than the bare framework's,
// and B/op.
func overBare(t *table, rs results, kase, lib string, res result) string {
	a := res["allocs/op"]
	s := number(a) + " allocs"
	if b, ok := rs.get(t.bench, kase, "bare", "allocs/op"); ok && lib != "bare" {
		s += fmt.Sprintf(" (+%s)", number(a-b))
	}
	return s + ", " + number(res["B/op"]) + " B"
}

func serverCPU(_ *table, _ results, _, _ string, res result) string {
	s := number(res["redis-cpu-us/decision"]) + " µs"
	if res["scripts/decision"] == 0 {
		return s + " (no script)"
	}
	return s + fmt.Sprintf(" (scripts: %s × %s µs)", number(res["scripts/decision"]), number(perScript(res)))
}

// perScript is the usec of one script call: script-us/decision over
// scripts/decision.
func perScript(res result) float64 {
	if res["scripts/decision"] == 0 {
		return 0
	}
	return res["script-us/decision"] / res["scripts/decision"]
}

func microseconds(t *table, _ results, _, _ string, res result) string {
	return number(res[t.unit]/1000) + " µs"
}
