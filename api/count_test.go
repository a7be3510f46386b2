package api

import (
	"fmt"
	"go/ast"
	"go/token"
	"strings"
)

// counts are a package's exported names by kind, as the API v1 issue's
// apicount tool counts them (/work/shared/tools/apicount then; its rules are
// restated here so that this directory stands alone).
type counts struct {
	funcs   int // exported functions
	types   int // exported types, aliases included
	methods int // exported methods of exported types
	fields  int // exported, named fields of exported struct types
	imeths  int // exported methods of exported interface types
	consts  int // exported constants
	vars    int // exported variables
}

func (c counts) total() int {
	return c.funcs + c.types + c.methods + c.fields + c.imeths + c.consts + c.vars
}

func (c *counts) add(o counts) {
	c.funcs += o.funcs
	c.types += o.types
	c.methods += o.methods
	c.fields += o.fields
	c.imeths += o.imeths
	c.consts += o.consts
	c.vars += o.vars
}

// countNames counts the exported names of a package's files. It is written
// apart from the lister, from the rules alone, so that a line the lister
// drops or repeats shows as a difference of counts. One departure from
// apicount: a method of a generic type of several type parameters
// (func (s *T[K, V]) M()) counts, where apicount, which strips only one
// type argument from a receiver, misses it (no such type is public today).
func countNames(files []*ast.File) counts {
	var c counts
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					c.funcs++
					continue
				}
				if len(d.Recv.List) == 0 {
					continue
				}
				t := d.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				switch ix := t.(type) {
				case *ast.IndexExpr:
					t = ix.X
				case *ast.IndexListExpr:
					t = ix.X
				}
				if id, ok := t.(*ast.Ident); ok && id.IsExported() {
					c.methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						c.types++
						switch t := s.Type.(type) {
						case *ast.StructType:
							c.fields += exportedNames(t.Fields)
						case *ast.InterfaceType:
							c.imeths += exportedNames(t.Methods)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							switch {
							case !n.IsExported():
							case d.Tok == token.CONST:
								c.consts++
							default:
								c.vars++
							}
						}
					}
				}
			}
		}
	}
	return c
}

func exportedNames(fl *ast.FieldList) int {
	n := 0
	for _, f := range fl.List {
		for _, name := range f.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

// lineKind is what a listing line lists.
type lineKind int

const (
	kindFunc lineKind = iota
	kindMethod
	kindType
	kindField
	kindIMeth
	kindConst
	kindVar
	kindStructure // an embedded field or element, or "unexported methods": not a name
)

// classify parses a listing line back into its package and kind, from the
// text alone: the test runs it over the lines written to v1.txt.
func classify(line string) (pkg string, kind lineKind, err error) {
	rest, ok := strings.CutPrefix(line, "pkg ")
	pkg, rest, ok2 := strings.Cut(rest, ", ")
	if !ok || !ok2 || pkg == "" {
		return "", 0, fmt.Errorf("not a listing line: %q", line)
	}
	switch {
	case strings.HasPrefix(rest, "func "):
		return pkg, kindFunc, nil
	case strings.HasPrefix(rest, "method ("):
		return pkg, kindMethod, nil
	case strings.HasPrefix(rest, "const "):
		return pkg, kindConst, nil
	case strings.HasPrefix(rest, "var "):
		return pkg, kindVar, nil
	case strings.HasPrefix(rest, "type "):
	default:
		return "", 0, fmt.Errorf("unknown kind of listing line: %q", line)
	}
	// type NAME[TYPEPARAMS] (= )?(struct|interface), MEMBER is a member;
	// anything else from "type " is the type itself.
	s := strings.TrimPrefix(rest, "type ")
	end := strings.IndexAny(s, " [")
	if end <= 0 {
		return "", 0, fmt.Errorf("no type name in listing line: %q", line)
	}
	s = s[end:]
	if strings.HasPrefix(s, "[") {
		depth := 0
		for i, r := range s {
			if r == '[' {
				depth++
			} else if r == ']' {
				depth--
			}
			if depth == 0 {
				s = s[i+1:]
				break
			}
		}
	}
	s = strings.TrimPrefix(s, " =")
	for prefix, k := range map[string]lineKind{" struct, ": kindField, " interface, ": kindIMeth} {
		if m, ok := strings.CutPrefix(s, prefix); ok {
			if strings.HasPrefix(m, "embedded ") || m == "unexported methods" {
				return pkg, kindStructure, nil
			}
			return pkg, k, nil
		}
	}
	return pkg, kindType, nil
}

// countLines counts listing lines by package and kind; structure lines are
// returned apart, by package.
func countLines(lines []string) (map[string]counts, map[string]int, error) {
	byPkg := map[string]counts{}
	structure := map[string]int{}
	for _, line := range lines {
		pkg, kind, err := classify(line)
		if err != nil {
			return nil, nil, err
		}
		c := byPkg[pkg]
		switch kind {
		case kindFunc:
			c.funcs++
		case kindMethod:
			c.methods++
		case kindType:
			c.types++
		case kindField:
			c.fields++
		case kindIMeth:
			c.imeths++
		case kindConst:
			c.consts++
		case kindVar:
			c.vars++
		case kindStructure:
			structure[pkg]++
		}
		byPkg[pkg] = c
	}
	return byPkg, structure, nil
}
