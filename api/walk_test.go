package api

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// module is a Go module on disk.
type module struct {
	root string // absolute directory of its go.mod
	path string // its module path
}

// findModule walks up from dir to the first directory holding a go.mod: the
// test runs in api/, and the listing covers the whole module.
func findModule(dir string) (module, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return module{}, err
	}
	for start := dir; ; {
		gomod := filepath.Join(dir, "go.mod")
		data, err := os.ReadFile(gomod)
		if err == nil {
			p, err := modulePath(data)
			if err != nil {
				return module{}, fmt.Errorf("%s: %w", gomod, err)
			}
			return module{root: dir, path: p}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return module{}, err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return module{}, fmt.Errorf("no go.mod in %s or any directory above it", start)
		}
		dir = parent
	}
}

// modulePath returns the path of go.mod's module directive (the standard
// library has no go.mod parser; golang.org/x/mod would be a dependency for
// one line).
func modulePath(gomod []byte) (string, error) {
	for _, line := range strings.Split(string(gomod), "\n") {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(line)
		if len(fields) != 2 || fields[0] != "module" {
			continue
		}
		p := fields[1]
		if uq, err := strconv.Unquote(p); err == nil {
			p = uq
		}
		if p == "" {
			break
		}
		return p, nil
	}
	return "", errors.New("no module directive")
}

// apiPackage is one public package: the non-test Go files of a directory.
type apiPackage struct {
	dir   string // slash-separated, relative to the module root; "." for the root
	path  string // import path
	files []*ast.File
}

// isPublic reports whether the package in dir (slash-separated, relative to
// the module root) is part of the public API: not under examples/, cmd/ or
// bench/, and no path element named internal (the Go rule, and the API v1
// issue's).
func isPublic(dir string) bool {
	if dir == "." {
		return true
	}
	elems := strings.Split(dir, "/")
	switch elems[0] {
	case "examples", "cmd", "bench":
		return false
	}
	for _, e := range elems {
		if e == "internal" {
			return false
		}
	}
	return true
}

// skipDir reports whether the walk leaves out directory name (not the
// root) altogether, as the go command does: testdata, vendor, and names
// starting with "." or "_".
func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// publicPackages parses m's public packages, sorted by directory. A
// directory below the root with its own go.mod is another module and is
// skipped with everything under it. Every .go file that is not a _test.go
// file is read, whatever its build constraints, as apicount does: the
// listing is the same on every GOOS, and a name declared for two platforms
// is listed (and counted) twice.
func publicPackages(fset *token.FileSet, m module) ([]*apiPackage, error) {
	var pkgs []*apiPackage
	err := filepath.WalkDir(m.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(m.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			if skipDir(d.Name()) || !isPublic(rel) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		files, err := parseDir(fset, m, rel)
		if err != nil {
			return err
		}
		if len(files) > 0 {
			pkgs = append(pkgs, &apiPackage{dir: rel, path: importPath(m, rel), files: files})
		}
		return nil
	})
	return pkgs, err
}

// importPath is the import path of the package in dir.
func importPath(m module, dir string) string {
	if dir == "." {
		return m.path
	}
	return path.Join(m.path, dir)
}

// parseDir parses the non-test .go files of dir (slash-separated, relative
// to m's root), in name order. A file named in an error is named relative
// to the root. A file that does not parse is an error: apicount skips it
// silently, which would drop its names from the listing.
func parseDir(fset *token.FileSet, m module, dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(filepath.Join(m.root, filepath.FromSlash(dir)))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		rel := path.Join(dir, name)
		src, err := os.ReadFile(filepath.Join(m.root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
