package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGenerated fails while an adapter's options_gen.go differs from what
// go generate ./adapters/... would write: an option added to, changed in
// or removed from httplimit, or a hand edit.
func TestGenerated(t *testing.T) {
	root, err := moduleRoot(".")
	require.NoError(t, err)
	adapters := filepath.Join(root, "adapters")
	entries, err := os.ReadDir(adapters)
	require.NoError(t, err)
	var checked []string
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" {
			continue
		}
		dir := filepath.Join(adapters, e.Name())
		pkg := packageName(t, dir)
		want, err := render(root, pkg)
		require.NoError(t, err, pkg)
		got, err := os.ReadFile(filepath.Join(dir, fileName))
		require.NoError(t, err, "%s has no %s: run go generate ./adapters/...", pkg, fileName)
		assert.Equal(t, string(want), string(got), "adapters/%s/%s is stale: run go generate ./adapters/...", e.Name(), fileName)
		checked = append(checked, pkg)
	}
	assert.ElementsMatch(t, []string{"ginlimit", "echolimit", "chilimit", "fiberlimit"}, checked, "adapters checked")
}

// TestOptionsWrapped checks that the options users need are among those
// the generator finds, with their httplimit types qualified.
func TestOptionsWrapped(t *testing.T) {
	root, err := moduleRoot(".")
	require.NoError(t, err)
	opts, imports, err := parseOptions(filepath.Join(root, httplimitDir))
	require.NoError(t, err)
	params := map[string]string{}
	for _, o := range opts {
		params[o.Name] = o.Params
		assert.NotEmpty(t, o.Doc, o.Name)
	}
	for name, want := range map[string]string{
		"WithKeyFunc":      "fn keyfuncs.Func",
		"WithCost":         "cost func(keyfuncs.Request) int64",
		"WithSkip":         "skip func(keyfuncs.Request) bool",
		"WithHeaders":      "cfg headers.Config",
		"WithResponder":    "h httplimit.Responder",
		"WithErrorHandler": "h httplimit.ErrorHandler",
		"WithMaxDelay":     "d time.Duration",
	} {
		assert.Equal(t, want, params[name], name)
	}
	assert.Contains(t, imports, httplimitPath)
}

// TestRenderNamesThePackage checks that the adapters' files differ only in
// their package clause.
func TestRenderNamesThePackage(t *testing.T) {
	root, err := moduleRoot(".")
	require.NoError(t, err)
	a, err := render(root, "alimit")
	require.NoError(t, err)
	b, err := render(root, "blimit")
	require.NoError(t, err)
	assert.Contains(t, string(a), "\npackage alimit\n")
	assert.Equal(t, string(a), strings.Replace(string(b), "package blimit", "package alimit", 1))
}

// packageName returns the name of the Go package in dir.
func packageName(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") && e.Name() != fileName {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.PackageClauseOnly)
			require.NoError(t, err)
			return f.Name.Name
		}
	}
	require.FailNow(t, "no Go file", dir)
	return ""
}
