package snippets

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The prose-name check: every pkg.Name (and pkg.Name.Member) that the
// guides and the package docs mention must be in the API listing,
// api/v1.txt, so that a guide never teaches a removed or misspelt name.
// The snippets are compiled (TestSnippets); this reads the prose around
// them. docs/migrating.md names removed things on purpose and is left out.

// importNames maps a package's folder name to the name its users write:
// the adapters and the exporters are imported under their package names.
var importNames = map[string]string{
	"chi": "chilimit", "echo": "echolimit", "fiber": "fiberlimit", "gin": "ginlimit",
	"otel": "otellimit", "prometheus": "promlimit", "slog": "sloglimit",
}

// listing is the API listing read: for each package, as users name it,
// its exported names, and for each type its fields and methods.
type listing struct {
	names   map[string]map[string]bool            // package, name
	members map[string]map[string]map[string]bool // package, type, member
}

var (
	listingLine = regexp.MustCompile(`^pkg github\.com/apigate/ratelimit/(\S+), (.*)$`)
	// "func NewLimiter(", "type Policy struct", "const CountAll Counts", "var ErrStore error"
	declName = regexp.MustCompile(`^(?:func|type|const|var) ([A-Z]\w*)`)
	// "method (*Limiter) AllowN(", "method (Health) String("
	methodName = regexp.MustCompile(`^method \(\*?([A-Z]\w*)\) ([A-Z]\w*)`)
	// "type Policy struct, Limit int64", "type Store interface, Take(...", "type Event struct, embedded Decision"
	memberName = regexp.MustCompile(`^type ([A-Z]\w*) (?:struct|interface), (?:embedded )?\*?(?:\w+\.)?([A-Z]\w*)`)
)

// readListing parses the listing's lines.
func readListing(text string) listing {
	l := listing{names: map[string]map[string]bool{}, members: map[string]map[string]map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		m := listingLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		folder := path.Base(m[1])
		pkg := folder
		if n, ok := importNames[folder]; ok {
			pkg = n
		}
		if l.names[pkg] == nil {
			l.names[pkg] = map[string]bool{}
			l.members[pkg] = map[string]map[string]bool{}
		}
		decl := m[2]
		add := func(typ, member string) {
			if l.members[pkg][typ] == nil {
				l.members[pkg][typ] = map[string]bool{}
			}
			l.members[pkg][typ][member] = true
		}
		if mm := methodName.FindStringSubmatch(decl); mm != nil {
			add(mm[1], mm[2])
		} else if mm := memberName.FindStringSubmatch(decl); mm != nil {
			add(mm[1], mm[2])
		}
		if dm := declName.FindStringSubmatch(decl); dm != nil {
			l.names[pkg][dm[1]] = true
		}
	}
	return l
}

// mention is pkg.Name or pkg.Name.Member in prose (one followed by "...",
// an elided list, is not checked).
var mention = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?\b`)

// stale returns the mentions in text (of file, its lines numbered from
// first) of a listed package that name nothing it lists, as
// "file:line: pkg.Name".
func (l listing) stale(file string, first int, text string) []string {
	var out []string
	for i, line := range strings.Split(text, "\n") {
		for _, at := range mention.FindAllStringSubmatchIndex(line, -1) {
			if rest := line[at[1]:]; strings.HasPrefix(rest, "...") || strings.HasPrefix(rest, "…") {
				continue // an elided list: core.With...
			}
			sub := func(k int) string {
				if at[2*k] < 0 {
					return ""
				}
				return line[at[2*k]:at[2*k+1]]
			}
			pkg, name, member := sub(1), sub(2), sub(3)
			names, ok := l.names[pkg]
			if !ok {
				continue // another package: net/http, slog, redis ...
			}
			switch {
			case !names[name]:
				out = append(out, fmt.Sprintf("%s:%d: %s.%s", file, first+i, pkg, name))
			case member != "" && l.members[pkg][name] != nil && !l.members[pkg][name][member]:
				out = append(out, fmt.Sprintf("%s:%d: %s.%s.%s", file, first+i, pkg, name, member))
			}
		}
	}
	return out
}

// guides returns the Markdown files whose prose is checked, relative to
// the root, slash-separated.
func guides(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "examples/README.md"}
	matches, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, m := range matches {
		if filepath.Base(m) != "migrating.md" {
			files = append(files, "docs/"+filepath.Base(m))
		}
	}
	return files
}

// packageDocs returns the doc comments of the library's packages (their
// package clauses' and their exported declarations'), each with its file
// and first line: what godoc shows a user. Internal packages, tests, the
// examples, the command and the benchmarks are not the library's.
func packageDocs(t *testing.T) (out []struct {
	file string
	line int
	text string
}) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), "."), d.Name() == "internal", d.Name() == "testdata",
				rel == "examples", rel == "cmd", rel == "bench", rel == "api":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		add := func(g *ast.CommentGroup) {
			if g != nil {
				out = append(out, struct {
					file string
					line int
					text string
				}{rel, fset.Position(g.Pos()).Line, g.Text()})
			}
		}
		add(f.Doc)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					add(d.Doc)
				}
			case *ast.GenDecl:
				add(d.Doc)
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Doc)
					case *ast.ValueSpec:
						add(s.Doc)
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestProseNames: the README, the guides, examples/README.md and the
// library's doc comments name only what api/v1.txt lists.
func TestProseNames(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "api", "v1.txt"))
	require.NoError(t, err)
	l := readListing(string(text))
	require.True(t, l.names["core"]["NewLimiter"] && l.members["core"]["Limiter"]["AllowN"], "the listing is read")
	var bad []string
	files := guides(t)
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		require.NoError(t, err)
		bad = append(bad, l.stale(f, 1, string(src))...)
	}
	docs := packageDocs(t)
	require.Greater(t, len(docs), 100, "the library's doc comments are read")
	for _, d := range docs {
		bad = append(bad, l.stale(d.file, d.line, d.text)...)
	}
	assert.Empty(t, bad, "names in the prose that api/v1.txt does not list (removed or misspelt): fix the text, or the name")
}

// TestProseNamesHarness: the check finds a removed name, a misspelt one
// and a removed method, and passes names that exist and other packages'.
func TestProseNamesHarness(t *testing.T) {
	l := readListing(`pkg github.com/apigate/ratelimit/core, func NewLimiter(Store, []Policy, ...Option) (*Limiter, error)
pkg github.com/apigate/ratelimit/core, method (*Limiter) AllowN(context.Context, string, int64, time.Time) (Decision, error)
pkg github.com/apigate/ratelimit/core, type Limiter struct
pkg github.com/apigate/ratelimit/core, type Policy struct, Limit int64
pkg github.com/apigate/ratelimit/adapters/gin, func New(*httplimit.Flow) gin.HandlerFunc
`)
	got := l.stale("docs/x.md", 10, "Build it with `core.NewLimiter`, call `core.Limiter.AllowN`;\n"+
		"set core.Policy.Limit, mount ginlimit.New, log with slog.Default(), pass core.With... options.\n"+
		"Old: `core.PartitionError`, `ginlimit.WithSkipper`, `core.Limiter.Shadow`, core.Policy.Burst.")
	assert.Equal(t, []string{
		"docs/x.md:12: core.PartitionError",
		"docs/x.md:12: ginlimit.WithSkipper",
		"docs/x.md:12: core.Limiter.Shadow",
		"docs/x.md:12: core.Policy.Burst",
	}, got)
}
