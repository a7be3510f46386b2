package monitoring

import (
	"errors"
	"fmt"
	"strings"
)

// signal returns the 0/1 form of an alert's expression (see ruleExpr.Signal):
// each top-level comparison made bool, each top-level `and` a product.
func signal(expr string) (string, error) {
	parts, mods, err := splitAnd(expr)
	if err != nil {
		return "", err
	}
	for i, p := range parts {
		if parts[i], err = boolComparison(p); err != nil {
			return "", fmt.Errorf("%w in %q", err, p)
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(" *")
			if mods[i-1] != "" {
				b.WriteString(" " + mods[i-1])
			}
			b.WriteString(" ")
		}
		b.WriteString("(" + p + ")")
	}
	return b.String(), nil
}

// splitAnd splits expr at its top-level `and` operators, and returns the
// operands and each `and`'s matching modifier (on(...), ignoring(...) or
// ""). A top-level `or` or `unless` is an error: they have no 0/1 form
// that keeps their matching.
func splitAnd(expr string) (parts, mods []string, err error) {
	toks, err := topLevel(expr)
	if err != nil {
		return nil, nil, err
	}
	start := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.word {
		case "or", "unless":
			return nil, nil, fmt.Errorf("top-level %q: want `A op B` or `(A op B) and (C op D)`", t.word)
		case "and":
			parts = append(parts, strings.TrimSpace(expr[start:t.pos]))
			end := t.pos + len(t.word)
			mod := ""
			if i+1 < len(toks) && (toks[i+1].word == "on" || toks[i+1].word == "ignoring") {
				m := toks[i+1]
				if m.group == "" {
					return nil, nil, fmt.Errorf("%s without a label list", m.word)
				}
				mod = m.word + " " + m.group
				end = m.pos + len(m.word)
				end += strings.Index(expr[end:], m.group) + len(m.group)
				i++
			}
			mods = append(mods, mod)
			start = end
		}
	}
	parts = append(parts, strings.TrimSpace(expr[start:]))
	for _, p := range parts {
		if p == "" {
			return nil, nil, errors.New("empty operand of `and`")
		}
	}
	return parts, mods, nil
}

// comparisons are PromQL's comparison operators, two-character ones first.
var comparisons = []string{"==", "!=", ">=", "<=", ">", "<"}

// boolComparison returns part, stripped of parentheses around it all, with
// bool after its one top-level comparison operator.
func boolComparison(part string) (string, error) {
	part = stripParens(part)
	toks, err := topLevel(part)
	if err != nil {
		return "", err
	}
	at, op := -1, ""
	for i, t := range toks {
		if t.op == "" {
			continue
		}
		if at >= 0 {
			return "", errors.New("more than one top-level comparison")
		}
		at, op = t.pos, t.op
		if i+1 < len(toks) && toks[i+1].word == "bool" {
			return "", errors.New("a bool comparison already")
		}
	}
	if at < 0 {
		return "", errors.New("no top-level comparison")
	}
	end := at + len(op)
	return part[:end] + " bool" + part[end:], nil
}

// stripParens removes parentheses that enclose all of s, as often as they
// do.
func stripParens(s string) string {
	for {
		s = strings.TrimSpace(s)
		if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
			return s
		}
		depth := 0
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '(':
				depth++
			case ')':
				depth--
			}
			if depth == 0 && i < len(s)-1 {
				return s // the first '(' closes before the end: (a) > (b)
			}
		}
		s = s[1 : len(s)-1]
	}
}

// token is a keyword or a comparison operator found outside parentheses,
// braces, brackets and strings.
type token struct {
	pos  int
	word string // a keyword: and, or, unless, on, ignoring, bool, ...
	op   string // a comparison operator
	// group is the parenthesized label list that follows on or ignoring.
	group string
}

// topLevel scans expr and returns its top-level words and comparison
// operators. It fails on unbalanced brackets or an unterminated string.
func topLevel(expr string) ([]token, error) {
	var toks []token
	var stack []byte // open brackets
	closing := map[byte]byte{')': '(', '}': '{', ']': '['}
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, errors.New("unterminated string")
			}
			i = j
		case c == '(' || c == '{' || c == '[':
			stack = append(stack, c)
		case c == ')' || c == '}' || c == ']':
			if len(stack) == 0 || stack[len(stack)-1] != closing[c] {
				return nil, fmt.Errorf("unbalanced %q at %d", c, i)
			}
			stack = stack[:len(stack)-1]
		case len(stack) > 0:
		case isWordStart(c):
			j := i
			for j < len(expr) && isWordChar(expr[j]) {
				j++
			}
			t := token{pos: i, word: expr[i:j]}
			if t.word == "on" || t.word == "ignoring" {
				t.group = labelList(expr[j:])
			}
			toks = append(toks, t)
			i = j - 1
		default:
			for _, op := range comparisons {
				if strings.HasPrefix(expr[i:], op) {
					toks = append(toks, token{pos: i, op: op})
					i += len(op) - 1
					break
				}
			}
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return toks, nil
}

// labelList returns the parenthesized list at the start of s (after
// spaces), or "".
func labelList(s string) string {
	t := strings.TrimLeft(s, " \t\n")
	if !strings.HasPrefix(t, "(") {
		return ""
	}
	end := strings.IndexByte(t, ')')
	if end < 0 {
		return ""
	}
	return t[:end+1]
}

func isWordStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isWordChar(c byte) bool {
	return isWordStart(c) || '0' <= c && c <= '9'
}
