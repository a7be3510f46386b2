package api

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/printer"
	"go/token"
	"path"
	"sort"
	"strconv"
	"strings"
)

// lister prints the listing lines of packages. It reads only the AST: the
// type of a var without one is inferred from its initializer by the few
// rules of initType, reading other packages of the module when the
// initializer names them.
type lister struct {
	fset  *token.FileSet
	mod   module
	index map[string]*pkgIndex // by import path: the packages read so far
}

// pkgIndex is a package's top-level declarations, by name.
type pkgIndex struct {
	name  string // the package clause's name
	files []*ast.File
	funcs map[string]*ast.FuncDecl // functions, not methods
	types map[string]*ast.TypeSpec
	vars  map[string]varRef
}

// varRef is one name of a var declaration.
type varRef struct {
	file *ast.File
	spec *ast.ValueSpec
	i    int // the name's index in spec.Names
}

func newIndex(files []*ast.File) *pkgIndex {
	ix := &pkgIndex{
		files: files,
		funcs: map[string]*ast.FuncDecl{},
		types: map[string]*ast.TypeSpec{},
		vars:  map[string]varRef{},
	}
	for _, f := range files {
		if ix.name == "" {
			ix.name = f.Name.Name
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					ix.funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						ix.types[s.Name.Name] = s
					case *ast.ValueSpec:
						if d.Tok == token.VAR {
							for i, n := range s.Names {
								ix.vars[n.Name] = varRef{f, s, i}
							}
						}
					}
				}
			}
		}
	}
	return ix
}

// listAPI returns the sorted listing of pkgs. Every problem is reported,
// each with its file and line.
func listAPI(fset *token.FileSet, m module, pkgs []*apiPackage) ([]string, error) {
	l := &lister{fset: fset, mod: m, index: map[string]*pkgIndex{}}
	var lines []string
	var errs []error
	for _, p := range pkgs {
		ix := newIndex(p.files)
		l.index[p.path] = ix
		pl, err := l.listPackage(p.path, ix)
		lines = append(lines, pl...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	sort.Strings(lines)
	return lines, errors.Join(errs...)
}

// listPackage returns the lines of one package, unsorted.
func (l *lister) listPackage(importPath string, ix *pkgIndex) ([]string, error) {
	prefix := "pkg " + importPath + ", "
	var lines []string
	emit := func(s string) { lines = append(lines, prefix+s) }
	var errs []error
	for _, f := range ix.files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					emit("func " + d.Name.Name + typeParams(d.Type.TypeParams) + signature(d.Type))
					continue
				}
				if len(d.Recv.List) != 1 {
					continue // a parse error; parseDir would have failed
				}
				recv := d.Recv.List[0].Type
				if base := recvBase(recv); base != nil && base.IsExported() {
					emit("method (" + typeString(recv) + ") " + d.Name.Name + signature(d.Type))
				}
			case *ast.GenDecl:
				switch d.Tok {
				case token.TYPE:
					for _, s := range d.Specs {
						if s := s.(*ast.TypeSpec); s.Name.IsExported() {
							for _, line := range typeLines(s) {
								emit(line)
							}
						}
					}
				case token.CONST:
					cl, err := l.constLines(d)
					for _, line := range cl {
						emit(line)
					}
					if err != nil {
						errs = append(errs, err)
					}
				case token.VAR:
					for _, s := range d.Specs {
						s := s.(*ast.ValueSpec)
						for i, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							t, err := l.varType(ix, varRef{f, s, i}, 0)
							if err != nil {
								errs = append(errs, fmt.Errorf("%s: var %s: %w; declare its type (var %s T = ...)",
									l.fset.Position(n.Pos()), n.Name, err, n.Name))
								continue
							}
							emit("var " + n.Name + " " + t)
						}
					}
				}
			}
		}
	}
	return lines, errors.Join(errs...)
}

// recvBase is the type name of a method's receiver: T in T, *T, T[K] and
// *T[K, V]; nil if the receiver is written some other way.
func recvBase(recv ast.Expr) *ast.Ident {
	for {
		switch r := recv.(type) {
		case *ast.Ident:
			return r
		case *ast.StarExpr:
			recv = r.X
		case *ast.ParenExpr:
			recv = r.X
		case *ast.IndexExpr:
			recv = r.X
		case *ast.IndexListExpr:
			recv = r.X
		default:
			return nil
		}
	}
}

// typeLines returns the lines of an exported type: the type, then for a
// struct its exported and embedded fields and for an interface its methods
// and embedded elements.
func typeLines(s *ast.TypeSpec) []string {
	head := "type " + s.Name.Name + typeParams(s.TypeParams)
	if s.Assign.IsValid() {
		head += " ="
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		head += " struct"
		lines := []string{head}
		for _, fl := range t.Fields.List {
			if len(fl.Names) == 0 {
				// Embedded, exported or not: the AST cannot tell which
				// fields and methods an unexported type promotes, so the
				// embedding itself is listed, and adding or removing one
				// is a reviewed change.
				lines = append(lines, head+", embedded "+typeString(fl.Type))
			}
			for _, n := range fl.Names {
				if n.IsExported() {
					lines = append(lines, head+", "+n.Name+" "+typeString(fl.Type))
				}
			}
		}
		return lines
	case *ast.InterfaceType:
		head += " interface"
		lines := []string{head}
		unexported := false
		for _, fl := range t.Methods.List {
			if len(fl.Names) == 0 {
				lines = append(lines, head+", embedded "+typeString(fl.Type))
				continue
			}
			for _, n := range fl.Names {
				if !n.IsExported() {
					unexported = true
					continue
				}
				ft, _ := fl.Type.(*ast.FuncType)
				lines = append(lines, head+", "+n.Name+signature(ft))
			}
		}
		if unexported {
			// As Go's api files do: no implementation outside the package.
			lines = append(lines, head+", unexported methods")
		}
		return lines
	default:
		return []string{head + " " + typeString(t)}
	}
}

// constLines returns the lines of d's exported constants: "const NAME TYPE
// = VALUE", or "const NAME = VALUE" when untyped. A spec without type and
// values repeats the previous spec's, and iota is replaced by the spec's
// index, so that the line shows the value (Healthy Health = 0, then
// Recovering Health = 1): renumbering an enum is an API change.
func (l *lister) constLines(d *ast.GenDecl) ([]string, error) {
	var lines []string
	var errs []error
	var typ ast.Expr
	var values []ast.Expr
	for i, s := range d.Specs {
		s := s.(*ast.ValueSpec)
		if s.Type != nil || len(s.Values) > 0 {
			typ, values = s.Type, s.Values
		}
		for j, n := range s.Names {
			if !n.IsExported() {
				continue
			}
			if j >= len(values) {
				errs = append(errs, fmt.Errorf("%s: const %s has no value", l.fset.Position(n.Pos()), n.Name))
				continue
			}
			p := &exprPrinter{iota: i}
			line := "const " + n.Name
			if typ != nil {
				line += " " + p.str(typ)
			}
			lines = append(lines, line+" = "+p.str(values[j]))
		}
	}
	return lines, errors.Join(errs...)
}

// maxDepth bounds how many initializers varType follows (a var set from a
// var set from ...), against a cycle.
const maxDepth = 16

// varType returns the type of a var: the declared one, or the one its
// initializer gives.
func (l *lister) varType(ix *pkgIndex, v varRef, depth int) (string, error) {
	if v.spec.Type != nil {
		return typeString(v.spec.Type), nil
	}
	if len(v.spec.Values) != len(v.spec.Names) {
		return "", errors.New("set from a call of several results")
	}
	return l.initType(ix, v.file, v.spec.Values[v.i], depth)
}

// predeclared names the predeclared types, which a conversion may name.
var predeclared = map[string]bool{
	"any": true, "bool": true, "byte": true, "complex64": true, "complex128": true,
	"error": true, "float32": true, "float64": true, "int": true, "int8": true,
	"int16": true, "int32": true, "int64": true, "rune": true, "string": true,
	"uint": true, "uint8": true, "uint16": true, "uint32": true, "uint64": true,
	"uintptr": true,
}

// initType infers the type of an initializer from the AST alone, for the
// forms exported vars take: errors.New and fmt.Errorf (error), a composite
// literal or its address, a conversion, a call of a function of one result,
// a func literal, a basic literal (its default type), and another var of
// this package or of a package of this module (pkg.ErrX). Anything else is
// an error asking for a declared type: a guess would make a wrong listing.
func (l *lister) initType(ix *pkgIndex, f *ast.File, e ast.Expr, depth int) (string, error) {
	if depth > maxDepth {
		return "", errors.New("initializers nest too deep (a cycle?)")
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return l.initType(ix, f, e.X, depth)
	case *ast.BasicLit:
		switch e.Kind {
		case token.INT:
			return "int", nil
		case token.FLOAT:
			return "float64", nil
		case token.IMAG:
			return "complex128", nil
		case token.CHAR:
			return "rune", nil
		case token.STRING:
			return "string", nil
		}
	case *ast.CompositeLit:
		if e.Type != nil {
			return typeString(e.Type), nil
		}
	case *ast.UnaryExpr:
		if c, ok := e.X.(*ast.CompositeLit); ok && e.Op == token.AND && c.Type != nil {
			return "*" + typeString(c.Type), nil
		}
	case *ast.FuncLit:
		return typeString(e.Type), nil
	case *ast.Ident:
		if e.Name == "true" || e.Name == "false" {
			return "bool", nil
		}
		if v, ok := ix.vars[e.Name]; ok {
			return l.varType(ix, v, depth+1)
		}
	case *ast.SelectorExpr:
		if other, qual := l.imported(f, e.X); other != nil {
			if v, ok := other.vars[e.Sel.Name]; ok && ast.IsExported(e.Sel.Name) {
				t, err := l.varType(other, v, depth+1)
				return qualify(t, qual, other), err
			}
		}
	case *ast.CallExpr:
		return l.callType(ix, f, e)
	}
	return "", fmt.Errorf("cannot tell its type from an initializer %s", shorten(typeString(e)))
}

// stdResults are the result types of the standard library's functions that
// initialize exported vars, by import path and name; "_" stands for the
// package's name in the file.
var stdResults = map[string]string{
	"errors.New":                "error",
	"fmt.Errorf":                "error",
	"time.Date":                 "_.Time",
	"time.Unix":                 "_.Time",
	"regexp.MustCompile":        "*_.Regexp",
	"net/netip.MustParseAddr":   "_.Addr",
	"net/netip.MustParsePrefix": "_.Prefix",
}

// callType infers the type of a call: a conversion or a call of a function
// with one result, in this package or another of this module, or one of
// stdResults.
func (l *lister) callType(ix *pkgIndex, f *ast.File, call *ast.CallExpr) (string, error) {
	fail := fmt.Errorf("cannot tell its type from the call %s", shorten(typeString(call.Fun)))
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		if predeclared[fun.Name] {
			return fun.Name, nil
		}
		if t, ok := ix.types[fun.Name]; ok && t.TypeParams == nil {
			return fun.Name, nil
		}
		if fn, ok := ix.funcs[fun.Name]; ok {
			if r := oneResult(fn); r != nil {
				return typeString(r), nil
			}
		}
	case *ast.SelectorExpr:
		pkg, ok := fun.X.(*ast.Ident)
		if !ok {
			return "", fail
		}
		if r, ok := stdResults[importOf(f, pkg.Name)+"."+fun.Sel.Name]; ok {
			if r == "error" {
				return r, nil
			}
			return strings.Replace(r, "_", pkg.Name, 1), nil
		}
		other, qual := l.imported(f, pkg)
		if other == nil || !ast.IsExported(fun.Sel.Name) {
			return "", fail
		}
		if t, ok := other.types[fun.Sel.Name]; ok && t.TypeParams == nil {
			return pkg.Name + "." + fun.Sel.Name, nil
		}
		if fn, ok := other.funcs[fun.Sel.Name]; ok {
			if r := oneResult(fn); r != nil {
				return qualify(typeString(r), qual, other), nil
			}
		}
	}
	return "", fail
}

// oneResult is the result type of a non-generic function of one result.
func oneResult(fn *ast.FuncDecl) ast.Expr {
	r := fn.Type.Results
	if fn.Type.TypeParams != nil || r == nil || len(r.List) != 1 || len(r.List[0].Names) > 1 {
		return nil
	}
	return r.List[0].Type
}

// qualify writes a type read in package other, imported as qual, as this
// package sees it: a bare name of one of other's types gets the qualifier.
// Only a name, or a pointer to one, is qualified; the types exported vars
// have today (error, *T) need no more.
func qualify(t, qual string, other *pkgIndex) string {
	star := strings.HasPrefix(t, "*")
	name := strings.TrimPrefix(t, "*")
	if _, ok := other.types[name]; ok {
		name = qual + "." + name
	}
	if star {
		return "*" + name
	}
	return name
}

// importOf returns the path file f imports as name, "" if none.
func importOf(f *ast.File, name string) string {
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			continue
		}
		if im.Name != nil {
			if im.Name.Name == name {
				return p
			}
			continue
		}
		if defaultName(p) == name {
			return p
		}
	}
	return ""
}

// defaultName guesses the name of the package at import path p: its last
// element, without a major-version suffix. For this module's own packages
// (the only ones looked into) imported, imported checks the real name.
func defaultName(p string) string {
	base := path.Base(p)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" && path.Dir(p) != "." {
		base = path.Base(path.Dir(p))
	}
	return base
}

// imported returns the package of this module that x (a package name in
// file f) names, parsed on first use, and the qualifier f uses for it; nil
// if x names no package of this module.
func (l *lister) imported(f *ast.File, x ast.Expr) (*pkgIndex, string) {
	id, ok := x.(*ast.Ident)
	if !ok {
		return nil, ""
	}
	p := importOf(f, id.Name)
	var dir string
	switch {
	case p == l.mod.path:
		dir = "."
	case strings.HasPrefix(p, l.mod.path+"/"):
		dir = strings.TrimPrefix(p, l.mod.path+"/")
	default:
		return nil, ""
	}
	ix, ok := l.index[p]
	if !ok {
		files, err := parseDir(l.fset, l.mod, dir)
		if err == nil && len(files) > 0 {
			ix = newIndex(files)
		}
		l.index[p] = ix // nil if it cannot be read: the caller then fails
	}
	if ix == nil {
		return nil, ""
	}
	return ix, id.Name
}

// shorten cuts a long expression for an error message.
func shorten(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// typeParams prints a type parameter list, "" if none: [K comparable, V any].
func typeParams(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	p := &exprPrinter{iota: -1}
	var parts []string
	for _, f := range fl.List {
		for _, n := range f.Names {
			parts = append(parts, n.Name+" "+p.str(f.Type))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// signature prints a function's parameters and results, types only:
// "(context.Context, string, ...Option) (Decision, error)".
func signature(ft *ast.FuncType) string {
	p := &exprPrinter{iota: -1}
	return p.signature(ft)
}

// typeString prints a type (or any expression) on one line.
func typeString(e ast.Expr) string {
	p := &exprPrinter{iota: -1}
	return p.str(e)
}

// exprPrinter prints expressions on one line, with the names of parameters
// and results dropped at every depth. go/printer keeps the source's line
// breaks (a struct type's fields, one a line), so it prints only what this
// printer does not know, with its white space collapsed.
type exprPrinter struct {
	iota int // the value of iota, -1 outside a const declaration
}

func (p *exprPrinter) str(e ast.Expr) string {
	var b strings.Builder
	p.expr(&b, e)
	return b.String()
}

func (p *exprPrinter) list(b *strings.Builder, es []ast.Expr) {
	for i, e := range es {
		if i > 0 {
			b.WriteString(", ")
		}
		p.expr(b, e)
	}
}

func (p *exprPrinter) expr(b *strings.Builder, e ast.Expr) {
	switch e := e.(type) {
	case nil:
		b.WriteString("<nil>")
	case *ast.Ident:
		if e.Name == "iota" && p.iota >= 0 {
			b.WriteString(strconv.Itoa(p.iota))
			return
		}
		b.WriteString(e.Name)
	case *ast.BasicLit:
		v := e.Value
		if e.Kind == token.STRING && strings.ContainsAny(v, "\r\n") {
			if s, err := strconv.Unquote(v); err == nil {
				v = strconv.Quote(s) // a raw string over several lines, on one
			}
		}
		b.WriteString(v)
	case *ast.SelectorExpr:
		p.expr(b, e.X)
		b.WriteString("." + e.Sel.Name)
	case *ast.StarExpr:
		b.WriteString("*")
		p.expr(b, e.X)
	case *ast.UnaryExpr:
		b.WriteString(e.Op.String())
		p.expr(b, e.X)
	case *ast.BinaryExpr:
		p.expr(b, e.X)
		b.WriteString(" " + e.Op.String() + " ")
		p.expr(b, e.Y)
	case *ast.ParenExpr:
		b.WriteString("(")
		p.expr(b, e.X)
		b.WriteString(")")
	case *ast.CallExpr:
		p.expr(b, e.Fun)
		b.WriteString("(")
		p.list(b, e.Args)
		if e.Ellipsis.IsValid() {
			b.WriteString("...")
		}
		b.WriteString(")")
	case *ast.IndexExpr:
		p.expr(b, e.X)
		b.WriteString("[")
		p.expr(b, e.Index)
		b.WriteString("]")
	case *ast.IndexListExpr:
		p.expr(b, e.X)
		b.WriteString("[")
		p.list(b, e.Indices)
		b.WriteString("]")
	case *ast.Ellipsis:
		b.WriteString("...")
		if e.Elt != nil {
			p.expr(b, e.Elt)
		}
	case *ast.ArrayType:
		b.WriteString("[")
		if e.Len != nil {
			p.expr(b, e.Len)
		}
		b.WriteString("]")
		p.expr(b, e.Elt)
	case *ast.MapType:
		b.WriteString("map[")
		p.expr(b, e.Key)
		b.WriteString("]")
		p.expr(b, e.Value)
	case *ast.ChanType:
		switch e.Dir {
		case ast.SEND:
			b.WriteString("chan<- ")
		case ast.RECV:
			b.WriteString("<-chan ")
		default:
			b.WriteString("chan ")
		}
		p.expr(b, e.Value)
	case *ast.FuncType:
		b.WriteString("func")
		b.WriteString(p.signature(e))
	case *ast.StructType:
		var parts []string
		for _, f := range e.Fields.List {
			t := p.str(f.Type)
			if len(f.Names) == 0 {
				parts = append(parts, t)
			}
			for _, n := range f.Names {
				parts = append(parts, n.Name+" "+t)
			}
		}
		braced(b, "struct", parts)
	case *ast.InterfaceType:
		var parts []string
		for _, f := range e.Methods.List {
			if len(f.Names) == 0 {
				parts = append(parts, p.str(f.Type))
				continue
			}
			ft, _ := f.Type.(*ast.FuncType)
			for _, n := range f.Names {
				parts = append(parts, n.Name+p.signature(ft))
			}
		}
		braced(b, "interface", parts)
	default:
		// Not a type: a composite or func literal in an error message, a
		// slice expression or a type assertion in a constant's value.
		var buf bytes.Buffer
		if err := printer.Fprint(&buf, token.NewFileSet(), e); err != nil {
			fmt.Fprintf(b, "<%T>", e)
			return
		}
		b.WriteString(strings.Join(strings.Fields(buf.String()), " "))
	}
}

// braced writes "struct{}" or "struct{ A int; B string }".
func braced(b *strings.Builder, kw string, parts []string) {
	b.WriteString(kw)
	if len(parts) == 0 {
		b.WriteString("{}")
		return
	}
	b.WriteString("{ " + strings.Join(parts, "; ") + " }")
}

// signature prints "(PARAMS) RESULTS": one type per parameter (a, b int is
// int, int), one result bare, several in parentheses.
func (p *exprPrinter) signature(ft *ast.FuncType) string {
	if ft == nil {
		return "()"
	}
	params := p.fieldTypes(ft.Params)
	results := p.fieldTypes(ft.Results)
	s := "(" + strings.Join(params, ", ") + ")"
	switch len(results) {
	case 0:
	case 1:
		s += " " + results[0]
	default:
		s += " (" + strings.Join(results, ", ") + ")"
	}
	return s
}

func (p *exprPrinter) fieldTypes(fl *ast.FieldList) []string {
	if fl == nil {
		return nil
	}
	var ts []string
	for _, f := range fl.List {
		t := p.str(f.Type)
		n := len(f.Names)
		if n == 0 {
			n = 1
		}
		for range n {
			ts = append(ts, t)
		}
	}
	return ts
}
