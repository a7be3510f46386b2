package api

import (
	"errors"
	"flag"
	"fmt"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite "+listingFile+" from the source")

// listingFile is the listing, beside this test. The module has no release
// yet: v1.txt is the surface v1.0.0 will promise, rewritten by -update
// until then. Once v1 is tagged, Go's habit would freeze it and list later
// additions in v1.N.txt files, which this test would then read together.
const listingFile = "v1.txt"

// acceptCommand is the command that accepts a change of the surface.
const acceptCommand = "go test ./api -update"

// TestAPI regenerates the listing of the module's public API and compares
// it with v1.txt: any difference fails, with the lines added and removed.
// It also checks that the listing has exactly as many lines of each kind
// per package as countNames counts names.
func TestAPI(t *testing.T) {
	m, err := findModule(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	pkgs, err := publicPackages(fset, m)
	require.NoError(t, err)
	lines, err := listAPI(fset, m, pkgs)
	require.NoError(t, err)
	total, table := checkCounts(t, pkgs, lines)
	// Logged last, after any difference: seen with -v or on a failure.
	defer t.Logf("exported names per public package (+embed: structure lines, not counted):\n%s", table)

	got := strings.Join(lines, "\n")
	if len(lines) > 0 {
		got += "\n"
	}
	if *update {
		require.NoError(t, os.WriteFile(listingFile, []byte(got), 0o644))
		t.Logf("wrote %s: %d lines, %d exported names", listingFile, len(lines), total)
		return
	}
	data, err := os.ReadFile(listingFile)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("api/%s is missing: %s writes it", listingFile, acceptCommand)
	}
	require.NoError(t, err)
	if string(data) == got {
		return
	}
	added, removed := diffLines(splitLines(string(data)), lines)
	var b strings.Builder
	fmt.Fprintf(&b, "the public API differs from api/%s (%d names now): lines added %d, removed %d\n",
		listingFile, total, len(added), len(removed))
	for _, l := range removed {
		b.WriteString("- " + l + "\n")
	}
	for _, l := range added {
		b.WriteString("+ " + l + "\n")
	}
	if len(added)+len(removed) == 0 {
		b.WriteString("(the same lines, written differently: order, blank lines or line ends)\n")
	}
	b.WriteString("if the change is deliberate, accept it with: " + acceptCommand)
	t.Error(b.String())
}

// checkCounts fails t unless, for every package, the lines of each kind
// equal countNames's count; it returns the total and a table of the counts.
func checkCounts(t *testing.T, pkgs []*apiPackage, lines []string) (int, string) {
	t.Helper()
	listed, structure, err := countLines(lines)
	require.NoError(t, err)
	var sum counts
	var table strings.Builder
	fmt.Fprintf(&table, "%-24s %5s %5s %5s %5s %5s %5s %5s %6s %6s\n",
		"pkg", "func", "type", "meth", "field", "imeth", "const", "var", "TOTAL", "+embed")
	for _, p := range pkgs {
		want := countNames(p.files)
		assert.Equal(t, want, listed[p.path], "package %s: lines of each kind in the listing against names counted", p.path)
		delete(listed, p.path)
		sum.add(want)
		fmt.Fprintf(&table, "%-24s %5d %5d %5d %5d %5d %5d %5d %6d %6d\n", p.dir,
			want.funcs, want.types, want.methods, want.fields, want.imeths, want.consts, want.vars, want.total(), structure[p.path])
	}
	for path, c := range listed {
		assert.Equal(t, counts{}, c, "lines listed for %s, which is no public package", path)
	}
	embeds := 0
	for _, n := range structure {
		embeds += n
	}
	fmt.Fprintf(&table, "%-24s %5d %5d %5d %5d %5d %5d %5d %6d %6d", "all public",
		sum.funcs, sum.types, sum.methods, sum.fields, sum.imeths, sum.consts, sum.vars, sum.total(), embeds)
	return sum.total(), table.String()
}

// splitLines splits a listing file into its lines.
func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// diffLines returns the lines of b not in a and those of a not in b, sorted,
// counting repeats (a name declared for two platforms is listed twice).
func diffLines(a, b []string) (added, removed []string) {
	n := map[string]int{}
	for _, l := range a {
		n[l]++
	}
	for _, l := range b {
		n[l]--
	}
	for l, k := range n {
		for ; k < 0; k++ {
			added = append(added, l)
		}
		for ; k > 0; k-- {
			removed = append(removed, l)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

// writeTree writes files (slash-separated paths) under a new temporary
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	}
	return root
}

// listTree lists the module in root, from a directory below it as the test
// runs from api/.
func listTree(t *testing.T, root string) ([]string, []*apiPackage, error) {
	t.Helper()
	below := filepath.Join(root, "a", "b")
	require.NoError(t, os.MkdirAll(below, 0o755))
	m, err := findModule(below)
	require.NoError(t, err)
	require.Equal(t, "example.com/m", m.path)
	fset := token.NewFileSet()
	pkgs, err := publicPackages(fset, m)
	if err != nil {
		return nil, nil, err
	}
	lines, err := listAPI(fset, m, pkgs)
	return lines, pkgs, err
}

// fixture is a small module with one of each kind of name, the forms that
// need care (grouped names, iota, implicit repetition, generics, embedding,
// aliases, vars without a type), and everything the walk must leave out.
var fixture = map[string]string{
	"go.mod": "// a module\nmodule \"example.com/m\" // quoted\n\ngo 1.22\n",
	"a/a.go": `// Package a is a fixture.
package a

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"example.com/m/internal/x"
)

type Algorithm string

const (
	FixedWindow Algorithm = "fixed"
	hidden                = 1
	Big                   = 256 << 20
)

type Health int

const (
	Healthy Health = iota
	Recovering
	_
	Failing
)

const (
	FlagA, FlagB = 1 << iota, 2 << iota
	FlagC, FlagD
)

const Text = ` + "`two\nlines`" + `

var (
	ErrA     = errors.New("a")
	ErrB     = fmt.Errorf("b: %w", ErrA)
	ErrC     = ErrB
	ErrX     = x.ErrX
	Default  = &Policy{}
	Zero     = Policy{}
	Made     = New()
	Count    = 3
	Named    Health
	Conv     = Health(2)
	FromX    = x.Make()
	Epoch    = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	Hook     = func(ctx context.Context, n int) error { return nil }
	unlisted = 1
)

type Policy struct {
	Limit, Burst int64
	name         string
	Inner        struct {
		A int
		b string
	}
	io.Reader
	*embedded
	Fn func(ctx context.Context, keys ...string) (n int, err error)
	Ch <-chan struct{}
	M  map[string][]*Policy
}

type embedded struct{ X int }

type Store interface {
	Take(ctx context.Context, key string, cost int64) (int64, error)
	io.Closer
	private()
}

type Number interface {
	~int | ~int64
}

type Set[K comparable, V any] struct{ Items map[K]V }

func (s *Set[K, V]) Add(k K, v V) {}

func (s Set[K, V]) len() int { return 0 }

type List[T any] []T

func (l List[T]) Len() int { return len(l) }

type Option = func(*Policy)

type Func func(context.Context, string) (string, error)

func New(opts ...Option) *Policy { return nil }

func NewStore(s Store, p Policy, opts ...Option) (*Policy, error) { return nil, nil }

func Map[T, U any](in []T, f func(T) U) []U { return nil }

func (p *Policy) AllowN(ctx context.Context, key string, n int64) (ok bool, err error) {
	return false, nil
}

func (p Policy) String() string { return "" }

func (p *Policy) reset() {}

func (e *embedded) Exported() {}

func helper() {}
`,
	"a/a_test.go":             "package a\n\nfunc TestOnly() {}\n",
	"a/testdata/t.go":         "package t\n\nfunc InTestdata() {}\n",
	"a/_skip/s.go":            "package s\n\nfunc Underscore() {}\n",
	"a/.hidden/h.go":          "package h\n\nfunc Hidden() {}\n",
	"a/internal/y/y.go":       "package y\n\nfunc Internal() {}\n",
	"internal/x/x.go":         "package x\n\nimport \"errors\"\n\ntype T struct{}\n\nvar ErrX = errors.New(\"x\")\n\nfunc Make() *T { return nil }\n",
	"cmd/tool/main.go":        "package main\n\nfunc Exported() {}\n",
	"examples/e/e.go":         "package e\n\nfunc Example() {}\n",
	"bench/b.go":              "package bench\n\nfunc Bench() {}\n",
	"nested/go.mod":           "module example.com/nested\n",
	"nested/n.go":             "package nested\n\nfunc OtherModule() {}\n",
	"linux/l_linux.go":        "package linux\n\nconst Page = 4096\n",
	"linux/l_other.go":        "//go:build !linux\n\npackage linux\n\nconst Page = 4096\n",
	"root.go":                 "package m\n\n// V is at the root.\nvar V int\n",
	"docs/only/notgo.txt":     "not Go",
	"a/b/doc.go":              "// Package b has no exported names.\npackage b\n\nfunc unexported() {}\n",
	"a/b/internalname/doc.go": "package internalname\n\ntype T struct{ _ int }\n",
}

// fixtureListing is the fixture's listing, in full.
var fixtureListing = `pkg example.com/m, var V int
pkg example.com/m/a, const Big = 256 << 20
pkg example.com/m/a, const Failing Health = 3
pkg example.com/m/a, const FixedWindow Algorithm = "fixed"
pkg example.com/m/a, const FlagA = 1 << 0
pkg example.com/m/a, const FlagB = 2 << 0
pkg example.com/m/a, const FlagC = 1 << 1
pkg example.com/m/a, const FlagD = 2 << 1
pkg example.com/m/a, const Healthy Health = 0
pkg example.com/m/a, const Recovering Health = 1
pkg example.com/m/a, const Text = "two\nlines"
pkg example.com/m/a, func Map[T any, U any]([]T, func(T) U) []U
pkg example.com/m/a, func New(...Option) *Policy
pkg example.com/m/a, func NewStore(Store, Policy, ...Option) (*Policy, error)
pkg example.com/m/a, method (*Policy) AllowN(context.Context, string, int64) (bool, error)
pkg example.com/m/a, method (*Set[K, V]) Add(K, V)
pkg example.com/m/a, method (List[T]) Len() int
pkg example.com/m/a, method (Policy) String() string
pkg example.com/m/a, type Algorithm string
pkg example.com/m/a, type Func func(context.Context, string) (string, error)
pkg example.com/m/a, type Health int
pkg example.com/m/a, type List[T any] []T
pkg example.com/m/a, type Number interface
pkg example.com/m/a, type Number interface, embedded ~int | ~int64
pkg example.com/m/a, type Option = func(*Policy)
pkg example.com/m/a, type Policy struct
pkg example.com/m/a, type Policy struct, Burst int64
pkg example.com/m/a, type Policy struct, Ch <-chan struct{}
pkg example.com/m/a, type Policy struct, Fn func(context.Context, ...string) (int, error)
pkg example.com/m/a, type Policy struct, Inner struct{ A int; b string }
pkg example.com/m/a, type Policy struct, Limit int64
pkg example.com/m/a, type Policy struct, M map[string][]*Policy
pkg example.com/m/a, type Policy struct, embedded *embedded
pkg example.com/m/a, type Policy struct, embedded io.Reader
pkg example.com/m/a, type Set[K comparable, V any] struct
pkg example.com/m/a, type Set[K comparable, V any] struct, Items map[K]V
pkg example.com/m/a, type Store interface
pkg example.com/m/a, type Store interface, Take(context.Context, string, int64) (int64, error)
pkg example.com/m/a, type Store interface, embedded io.Closer
pkg example.com/m/a, type Store interface, unexported methods
pkg example.com/m/a, var Conv Health
pkg example.com/m/a, var Count int
pkg example.com/m/a, var Default *Policy
pkg example.com/m/a, var Epoch time.Time
pkg example.com/m/a, var ErrA error
pkg example.com/m/a, var ErrB error
pkg example.com/m/a, var ErrC error
pkg example.com/m/a, var ErrX error
pkg example.com/m/a, var FromX *x.T
pkg example.com/m/a, var Hook func(context.Context, int) error
pkg example.com/m/a, var Made *Policy
pkg example.com/m/a, var Named Health
pkg example.com/m/a, var Zero Policy
pkg example.com/m/a/b/internalname, type T struct
pkg example.com/m/linux, const Page = 4096
pkg example.com/m/linux, const Page = 4096
`

// TestListFixture checks the whole format on the fixture, and that the
// counts agree with it.
func TestListFixture(t *testing.T) {
	t.Parallel()
	lines, pkgs, err := listTree(t, writeTree(t, fixture))
	require.NoError(t, err)
	assert.Equal(t, fixtureListing, strings.Join(lines, "\n")+"\n")

	var dirs []string
	for _, p := range pkgs {
		dirs = append(dirs, p.dir)
	}
	assert.Equal(t, []string{".", "a", "a/b", "a/b/internalname", "linux"}, dirs)
	listed, structure, err := countLines(lines)
	require.NoError(t, err)
	for _, p := range pkgs {
		assert.Equal(t, countNames(p.files), listed[p.path], p.path)
	}
	assert.Equal(t, counts{funcs: 3, types: 9, methods: 4, fields: 7, imeths: 1, consts: 10, vars: 13},
		listed["example.com/m/a"])
	assert.Equal(t, 5, structure["example.com/m/a"])
}

// TestListChanges checks that a change of the surface a reader cares about
// changes the listing: a parameter's type, a result, a receiver, a field's
// type, an enum's order; and that one that is not (a parameter's name, a
// comment, the order of declarations) does not.
func TestListChanges(t *testing.T) {
	t.Parallel()
	base := `package a

import "context"

type T struct{ N int }

type E int

const (
	A E = iota
	B
)

// F does.
func F(ctx context.Context, n int) (*T, error) { return nil, nil }

func (t *T) M(s string) {}
`
	list := func(src string) []string {
		lines, _, err := listTree(t, writeTree(t, map[string]string{"go.mod": "module example.com/m\n", "a/a.go": src}))
		require.NoError(t, err)
		return lines
	}
	before := list(base)
	for name, edit := range map[string][2]string{
		"param type":  {"n int)", "n int64)"},
		"result":      {"(*T, error)", "(T, error)"},
		"variadic":    {"n int)", "n ...int)"},
		"receiver":    {"(t *T) M", "(t T) M"},
		"field type":  {"N int }", "N uint }"},
		"enum order":  {"A E = iota\n\tB", "B E = iota\n\tA"},
		"method gone": {"func (t *T) M(s string) {}", ""},
	} {
		src := strings.Replace(base, edit[0], edit[1], 1)
		require.NotEqual(t, base, src, name)
		assert.NotEqual(t, before, list(src), "%s: the listing should change", name)
	}
	for name, edit := range map[string][2]string{
		"param name": {"n int)", "count int)"},
		"comment":    {"// F does.", "// F does something else."},
		"reorder":    {"type E int\n", ""},
	} {
		src := strings.Replace(base, edit[0], edit[1], 1)
		if name == "reorder" {
			src += "\ntype E int\n"
		}
		require.NotEqual(t, base, src, name)
		assert.Equal(t, before, list(src), "%s: the listing should not change", name)
	}
}

// TestListErrors checks that what the listing cannot show faithfully is a
// clear error naming the file, not a line left out or guessed.
func TestListErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ src, want string }{
		"parse": {"package a\n\nfunc F( {}\n", "a/a.go:3:"},
		"var from a method call": {"package a\n\nimport \"strings\"\n\nvar R = strings.NewReplacer(\"a\", \"b\")\n",
			"a/a.go:5:5: var R: cannot tell its type from the call strings.NewReplacer; declare its type (var R T = ...)"},
		"var of two results": {"package a\n\nfunc two() (int, int) { return 1, 2 }\n\nvar X, Y = two()\n",
			"a/a.go:5:5: var X: set from a call of several results"},
		"var cycle": {"package a\n\nvar X = Y\n\nvar Y = X\n", "initializers nest too deep"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := listTree(t, writeTree(t, map[string]string{"go.mod": "module example.com/m\n", "a/a.go": tc.src}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestModuleErrors checks findModule's errors: no go.mod above, and a
// go.mod without a module directive.
func TestModuleErrors(t *testing.T) {
	t.Parallel()
	root := writeTree(t, map[string]string{"go.mod": "go 1.22\n"})
	_, err := findModule(root)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no module directive")

	_, err = modulePath([]byte("module\n"))
	assert.Error(t, err)
	p, err := modulePath([]byte("module example.com/m // comment\n"))
	require.NoError(t, err)
	assert.Equal(t, "example.com/m", p)
}

// TestDiffLines checks the report's added and removed lines, repeats
// counted.
func TestDiffLines(t *testing.T) {
	t.Parallel()
	added, removed := diffLines([]string{"a", "b", "b", "c"}, []string{"b", "c", "d", "d"})
	assert.Equal(t, []string{"d", "d"}, added)
	assert.Equal(t, []string{"a", "b"}, removed)
}

// TestClassify checks classify on the lines a wrong parse would miscount:
// type parameters and func types with commas, a field named like a kind.
func TestClassify(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]lineKind{
		"pkg p, type F func(a, b int) (struct{}, error)":             kindType,
		"pkg p, type M[K comparable, V any] struct, Items map[K]V":   kindField,
		"pkg p, type M[K interface{ ~[]int }, V any] interface":      kindType,
		"pkg p, type M[K interface{ ~[]int }] interface, Get(K) V":   kindIMeth,
		"pkg p, type S struct, Embedded int":                         kindField,
		"pkg p, type S struct, embedded io.Reader":                   kindStructure,
		"pkg p, type I interface, unexported methods":                kindStructure,
		"pkg p, type A = struct, X int":                              kindField,
		"pkg p, type O = httplimit.Option":                           kindType,
		"pkg p, method (*S[K, V]) Add(K, V)":                         kindMethod,
		"pkg p, const X = 1":                                         kindConst,
		"pkg p, var X error":                                         kindVar,
		"pkg p, func F[T any, U any]([]T, func(T) U) []U":            kindFunc,
		"pkg github.com/x/y, type S struct, Fn func(int, ...string)": kindField,
	} {
		pkg, kind, err := classify(line)
		require.NoError(t, err, line)
		assert.Equal(t, want, kind, line)
		assert.NotEmpty(t, pkg)
	}
	for _, bad := range []string{"", "pkg p", "pkg p, field X", "pkg p, type "} {
		_, _, err := classify(bad)
		assert.Error(t, err, "%q", bad)
	}
}
