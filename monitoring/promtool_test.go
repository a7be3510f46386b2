package monitoring

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool. Without it the test is skipped,
// except under CI=true, where it fails: CI must run the rules' tests
// (.ci/run installs Debian's prometheus package, which ships promtool).
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("promtool is not on PATH and CI=true: the rules must be tested (apt-get install prometheus): %v", err)
	}
	t.Skipf("promtool is not on PATH (apt-get install prometheus): %v", err)
	return ""
}

// runPromtool runs promtool with args in this package's directory and
// fails the test with promtool's output when it fails.
func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
	t.Logf("promtool %v:\n%s", args, out)
}

// TestPromtoolCheckRules checks the rules file: syntax, PromQL, templates,
// and duplicate rules (lint, fatal).
func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", "--lint=all", "--lint-fatal", filepath.FromSlash(rulesPath))
}

// TestPromtoolTestRules runs the rules' unit tests.
func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", filepath.FromSlash(rulesTestPath))
}

// TestPromtoolParsesExprs has promtool parse every dashboard expression
// (variables substituted as dashboardExprs does) and every alert's
// Signal, as the recording rules of a scratch rules file.
func TestPromtoolParsesExprs(t *testing.T) {
	dash, err := dashboardExprs()
	require.NoError(t, err)
	rules, err := ruleExprs()
	require.NoError(t, err)

	var scratch []ruleSpec
	for i, e := range dash {
		scratch = append(scratch, ruleSpec{Record: fmt.Sprintf("dashboard:expr_%d:check", i), Expr: e})
	}
	for _, r := range rules {
		if r.IsAlert {
			scratch = append(scratch, ruleSpec{Record: "signal:" + r.Name + ":check", Expr: r.Signal})
		}
	}
	b, err := yaml.Marshal(ruleFile{Groups: []ruleGroup{{Name: "check", Rules: scratch}}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "exprs.yml")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	runPromtool(t, "check", "rules", path)
}
