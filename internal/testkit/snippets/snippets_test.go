package snippets

import (
	"bufio"
	"context"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/gobuild"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// root is the repository's root, from this folder.
const root = "../../.."

// A snippet is one ```go block of a Markdown file.
type snippet struct {
	file string // relative to the root, slash-separated: "docs/monitoring.md"
	line int    // of the block's first line of code
	code string
}

// pos is where the snippet starts, as an editor takes it.
func (s snippet) pos() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// extract returns the ```go blocks of the Markdown text src, read from
// file. A block left open is an error.
func extract(file, src string) ([]snippet, error) {
	var out []snippet
	var cur *snippet
	var code strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```go") && strings.TrimSpace(trimmed[len("```go"):]) == "":
			cur = &snippet{file: file, line: n + 1}
			code.Reset()
		case cur != nil && trimmed == "```":
			cur.code = code.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: the ```go block is not closed", cur.pos())
	}
	return out, nil
}

// packageClause finds a file's package clause: the first line that is
// neither blank nor a comment.
var packageClause = regexp.MustCompile(`(?m)\A(?:\s*(?://[^\n]*)?\n)*package\s+\w+`)

// build compiles every snippet, each as a package of its own in a
// temporary module that requires this repository's module (replaced by
// its directory) and its dependencies as its go.mod says, offline, from
// the module cache that the tests of the repository fill. It returns the
// compiler's complaints, positions given in the Markdown files
// ("README.md:75:2: undefined: x"), or "" when all compiled. Under
// -short, or with no go command, it skips t once it needs the compiler
// (gobuild.Tool).
func build(t *testing.T, snippets []snippet) string {
	t.Helper()
	abs, err := filepath.Abs(root)
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(abs, "go.mod"))
	require.NoError(t, err)
	gosum, err := os.ReadFile(filepath.Join(abs, "go.sum"))
	require.NoError(t, err)

	dir := t.TempDir()
	// The library's own go.mod, renamed: its requirements are the
	// snippets' (an adapter's framework, Prometheus, OpenTelemetry, Redis).
	mod := regexp.MustCompile(`(?m)^module\s+\S+`).ReplaceAllString(string(gomod), "module snippets")
	mod += fmt.Sprintf("\nrequire github.com/apigate/ratelimit v0.0.0-00010101000000-000000000000\n\nreplace github.com/apigate/ratelimit => %s\n", filepath.ToSlash(abs))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644))

	var problems []string
	for i, s := range snippets {
		if !packageClause.MatchString(s.code) {
			problems = append(problems, fmt.Sprintf("%s: not a complete file: a snippet starts with its package clause, then its imports", s.pos()))
			continue
		}
		if formatted, err := format.Source([]byte(s.code)); err == nil && string(formatted) != s.code {
			problems = append(problems, fmt.Sprintf("%s: not gofmt-formatted; as gofmt writes it:\n%s", s.pos(), formatted))
		}
		pkg := filepath.Join(dir, fmt.Sprintf("s%03d", i))
		require.NoError(t, os.Mkdir(pkg, 0o755))
		// A line directive: the compiler reports positions in the Markdown file.
		src := fmt.Sprintf("//line %s:%d\n%s", s.file, s.line, s.code)
		require.NoError(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(src), 0o644))
	}
	if len(problems) == len(snippets) {
		return strings.Join(problems, "\n")
	}

	goTool := gobuild.Tool(t, "compiles Go snippets with the go command")
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(8*time.Minute)) // a cold cache on a busy machine
	defer cancel()
	// -race when this test is: the packages are then those the test run
	// compiled already (see gobuild).
	args := append(append([]string{"build"}, gobuild.Flags()...), "-o", os.DevNull, "./...")
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(l, "# ") { // "# snippets/s003": the package, meaningless here
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			lines = []string{err.Error()}
		}
		problems = append(problems, lines...)
	}
	return strings.Join(problems, "\n")
}

// docs returns the snippets of README.md and docs/*.md.
func docs(t *testing.T) []snippet {
	t.Helper()
	files := []string{"README.md"}
	matches, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, m := range matches {
		files = append(files, "docs/"+filepath.Base(m))
	}
	var all []snippet
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		require.NoError(t, err)
		s, err := extract(f, string(src))
		require.NoError(t, err)
		all = append(all, s...)
	}
	return all
}

// TestSnippets compiles every Go snippet of README.md and docs/*.md.
func TestSnippets(t *testing.T) {
	snippets := docs(t)
	require.GreaterOrEqual(t, len(snippets), 10, "the README and the guides have snippets")
	if problems := build(t, snippets); problems != "" {
		t.Errorf("a Go snippet of the documentation does not compile (each ```go block is a complete file, built against this repository):\n%s", problems)
	}
}

// TestHarness: the test fails for a snippet that does not compile, naming
// its file, line and the compiler's complaint, and for a fragment without
// a package clause; it passes a good one.
func TestHarness(t *testing.T) {
	md := "# Guide\n\nText.\n\n```go\npackage main\n\nimport \"github.com/apigate/ratelimit/core\"\n\nfunc main() {\n\t_ = core.NoSuchName\n}\n```\n\n" +
		"```go\nlimiter, err := core.NewLimiter(store, policy)\n```\n\n" +
		"```go\n// A good one.\npackage main\n\nimport \"github.com/apigate/ratelimit/core\"\n\nfunc main() { _ = core.TokenBucket }\n```\n" +
		"```go\npackage main\n\nfunc main() {\n  println()\n}\n```\n"
	snippets, err := extract("docs/broken.md", md)
	require.NoError(t, err)
	require.Len(t, snippets, 4)
	assert.Equal(t, "docs/broken.md:6", snippets[0].pos())

	problems := build(t, snippets)
	assert.Contains(t, problems, "docs/broken.md:11:", "the file and line of the error")
	assert.Contains(t, problems, "undefined: core.NoSuchName", "the compiler's complaint")
	assert.Contains(t, problems, "docs/broken.md:16: not a complete file", "the fragment")
	assert.Contains(t, problems, "docs/broken.md:28: not gofmt-formatted", "the badly formatted one")
	assert.NotRegexp(t, `broken\.md:2[0-5]:`, problems, "the good snippet (lines 20 to 25) passes")

	assert.Empty(t, build(t, snippets[2:3]), "a good snippet alone")

	_, err = extract("x.md", "```go\npackage main\n")
	assert.ErrorContains(t, err, "x.md:2: the ```go block is not closed")
}
