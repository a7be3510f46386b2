package headers

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// This file parses Structured Field Lists of Items (RFC 9651, Section 4.2),
// the syntax of RateLimit and RateLimit-Policy. Every bare item type is
// checked, so that unknown parameters (such as the draft's qu and pk) are
// skipped only when well formed; only integers, strings and tokens keep
// their value. Inner lists are rejected: neither field has any.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfByteSeq
	sfBoolean
	sfDate
	sfDisplayString
)

// sfBare is a bare item: str holds a string's or token's value, num an
// integer's.
type sfBare struct {
	kind sfKind
	str  string
	num  int64
}

// sfParam is one parameter of an item.
type sfParam struct {
	key string
	val sfBare
}

// sfItem is one member of a List.
type sfItem struct {
	val    sfBare
	params []sfParam
}

// param returns the value of the parameter named key.
func (it sfItem) param(key string) (sfBare, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.val, true
		}
	}
	return sfBare{}, false
}

// sfParser holds the input and the position of the next byte to read.
type sfParser struct {
	s string
	i int
}

var (
	errSFSyntax    = errors.New("not a structured field list")
	errSFEmpty     = errors.New("empty list")
	errSFInnerList = errors.New("inner lists are not allowed")
)

// parseSFList parses s, a field value, as a non-empty List of Items.
func parseSFList(s string) ([]sfItem, error) {
	p := sfParser{s: s}
	p.skipOWS()
	end := len(p.s)
	for end > p.i && (p.s[end-1] == ' ' || p.s[end-1] == '\t') {
		end--
	}
	p.s = p.s[:end]
	if p.i == len(p.s) {
		return nil, errSFEmpty
	}
	var items []sfItem
	for {
		if p.s[p.i] == '(' {
			return nil, errSFInnerList
		}
		val, err := p.bare()
		if err != nil {
			return nil, err
		}
		it := sfItem{val: val}
		if it.params, err = p.params(); err != nil {
			return nil, err
		}
		items = append(items, it)
		p.skipOWS()
		if p.i == len(p.s) {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, errSFSyntax
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, errSFSyntax // trailing comma
		}
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// params parses ";key[=value]" parameters; a key seen twice keeps its last
// value, as RFC 9651 says.
func (p *sfParser) params() ([]sfParam, error) {
	var ps []sfParam
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		for p.i < len(p.s) && p.s[p.i] == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		val := sfBare{kind: sfBoolean, num: 1}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if val, err = p.bare(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range ps {
			if ps[j].key == key {
				ps[j].val, replaced = val, true
			}
		}
		if !replaced {
			ps = append(ps, sfParam{key, val})
		}
	}
	return ps, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i == len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", errSFSyntax
	}
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (sfBare, error) {
	if p.i == len(p.s) {
		return sfBare{}, errSFSyntax
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		p.i++
		s, err := p.quoted()
		return sfBare{kind: sfString, str: s}, err
	case c == '*' || isAlpha(c):
		start := p.i
		for p.i++; p.i < len(p.s) && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/'); p.i++ {
		}
		return sfBare{kind: sfToken, str: p.s[start:p.i]}, nil
	case c == ':':
		for p.i++; p.i < len(p.s) && p.s[p.i] != ':'; p.i++ {
			if c := p.s[p.i]; !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
				return sfBare{}, errSFSyntax
			}
		}
		if p.i == len(p.s) {
			return sfBare{}, errSFSyntax
		}
		p.i++
		return sfBare{kind: sfByteSeq}, nil
	case c == '?':
		if p.i+1 == len(p.s) || (p.s[p.i+1] != '0' && p.s[p.i+1] != '1') {
			return sfBare{}, errSFSyntax
		}
		p.i += 2
		return sfBare{kind: sfBoolean, num: int64(p.s[p.i-1] - '0')}, nil
	case c == '@':
		p.i++
		v, err := p.number()
		if err != nil || v.kind != sfInteger {
			return sfBare{}, errSFSyntax
		}
		return sfBare{kind: sfDate, num: v.num}, nil
	case c == '%':
		return p.displayString()
	}
	return sfBare{}, errSFSyntax
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 3 fraction digits), RFC 9651, Section 4.2.4.
func (p *sfParser) number() (sfBare, error) {
	neg := p.i < len(p.s) && p.s[p.i] == '-'
	if neg {
		p.i++
	}
	start, dot := p.i, -1
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if c == '.' && dot < 0 && p.i > start && p.i-start <= 12 {
			dot = p.i
			continue
		}
		if !isDigit(c) {
			break
		}
		if dot < 0 && p.i-start >= 15 || dot >= 0 && p.i-dot > 3 {
			return sfBare{}, errSFSyntax
		}
	}
	if p.i == start {
		return sfBare{}, errSFSyntax
	}
	if dot >= 0 {
		if dot == p.i-1 {
			return sfBare{}, errSFSyntax
		}
		return sfBare{kind: sfDecimal}, nil
	}
	n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	if err != nil {
		return sfBare{}, errSFSyntax
	}
	if neg {
		n = -n
	}
	return sfBare{kind: sfInteger, num: n}, nil
}

// quoted parses the rest of a String whose opening '"' has been read.
func (p *sfParser) quoted() (string, error) {
	var b []byte // nil until the first escape
	start := p.i
	for ; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			if b == nil {
				return p.s[start : p.i-1], nil
			}
			return string(b), nil
		case c == '\\':
			if b == nil {
				b = append([]byte{}, p.s[start:p.i]...)
			}
			p.i++
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", errSFSyntax
			}
			b = append(b, p.s[p.i])
		case c < 0x20 || c > 0x7e:
			return "", errSFSyntax
		default:
			if b != nil {
				b = append(b, c)
			}
		}
	}
	return "", errSFSyntax
}

// displayString parses a Display String: %"..." with UTF-8 bytes
// percent-encoded in lowercase hex (RFC 9651, Section 4.2.10).
func (p *sfParser) displayString() (sfBare, error) {
	p.i++
	if p.i == len(p.s) || p.s[p.i] != '"' {
		return sfBare{}, errSFSyntax
	}
	var b []byte
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			if !utf8.Valid(b) {
				return sfBare{}, errSFSyntax
			}
			return sfBare{kind: sfDisplayString}, nil
		case c == '%':
			if p.i+2 >= len(p.s) || !isLCHex(p.s[p.i+1]) || !isLCHex(p.s[p.i+2]) {
				return sfBare{}, errSFSyntax
			}
			b = append(b, unhex(p.s[p.i+1])<<4|unhex(p.s[p.i+2]))
			p.i += 2
		case c < 0x20 || c > 0x7e:
			return sfBare{}, errSFSyntax
		default:
			b = append(b, c)
		}
	}
	return sfBare{}, errSFSyntax
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isLCHex(c byte) bool   { return isDigit(c) || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c - 'a' + 10
}

// isTChar reports whether c is a tchar of RFC 9110, Section 5.6.2.
func isTChar(c byte) bool {
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return isDigit(c) || isAlpha(c)
}
