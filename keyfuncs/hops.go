package keyfuncs

import "strings"

// hopStatus is what hopScanner.next found.
type hopStatus int

const (
	hopNode hopStatus = iota // the next hop's address text
	hopEnd                   // the chain is exhausted
	hopBad                   // a malformed element, or the byte budget is spent
)

// hopScanner reads a forwarding chain, X-Forwarded-For or Forwarded, from
// the RIGHT: the last element of the last header line first, since that
// is the one the nearest proxy wrote. Header lines are one list, in the
// order received (RFC 9110, section 5.3), so a client cannot choose which
// line is read by sending two.
//
// It examines at most budget bytes, counted from the right, and never
// scans beyond them: a header of a megabyte costs what one of 4 KiB does.
// It does not allocate; elements are substrings of the header lines.
type hopScanner struct {
	lines     []string // lines not yet started, in the order received
	cur       string   // unread part of the current line
	budget    int      // bytes left to examine
	forwarded bool     // RFC 7239 Forwarded rather than X-Forwarded-For
}

// next returns the address text of the next hop to the left: an
// X-Forwarded-For entry, or the for= node of a Forwarded element.
// Empty list elements are skipped, as RFC 9110 asks.
func (s *hopScanner) next() (string, hopStatus) {
	for {
		if s.cur == "" {
			if len(s.lines) == 0 {
				return "", hopEnd
			}
			s.cur = s.lines[len(s.lines)-1]
			s.lines = s.lines[:len(s.lines)-1]
			// A line costs a byte, so that empty lines are bounded too.
			if s.budget--; s.budget < 0 {
				return "", hopBad
			}
			continue
		}
		elem, ok := s.cutLast()
		if !ok {
			return "", hopBad
		}
		if elem = trimOWS(elem); elem == "" {
			continue
		}
		if !s.forwarded {
			return elem, hopNode
		}
		node, ok := forwardedFor(elem)
		if !ok {
			return "", hopBad
		}
		return node, hopNode
	}
}

// cutLast removes the last list element of the current line and returns
// it; ok is false when it does not end within the budget.
func (s *hopScanner) cutLast() (elem string, ok bool) {
	win := s.cur
	if len(win) > s.budget {
		win = win[len(win)-s.budget:]
	}
	i := lastComma(win, s.forwarded)
	if i < 0 {
		if len(win) < len(s.cur) {
			return "", false
		}
		elem, s.cur = s.cur, ""
		s.budget -= len(elem)
		return elem, true
	}
	i += len(s.cur) - len(win)
	elem, s.cur = s.cur[i+1:], s.cur[:i]
	s.budget -= len(elem) + 1
	return elem, true
}

// lastComma returns the index of the last comma in s, or -1. With quoted
// set, commas inside quoted strings do not count, and a quote preceded by
// an odd number of backslashes is an escaped character, not a delimiter.
// Read from the right, the elements a proxy appended are split correctly
// whatever the client wrote to their left.
func lastComma(s string, quoted bool) int {
	if !quoted {
		return strings.LastIndexByte(s, ',')
	}
	inQuote := false
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ',':
			if !inQuote {
				return i
			}
		case '"':
			n := 0
			for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
				n++
			}
			if n%2 == 0 {
				inQuote = !inQuote
			}
		}
	}
	return -1
}

// forwardedFor returns the node of the for= parameter of one Forwarded
// element (RFC 7239, section 4), such as
//
//	for=192.0.2.60;proto=http;by=203.0.113.43
//	for="[2001:db8:cafe::17]:4711"
//
// Parameter names are case-insensitive. ok is false when the element is
// malformed, has no for= parameter or has two: an element without a
// client address ends the walk, it is not skipped.
func forwardedFor(elem string) (node string, ok bool) {
	found := false
	for elem != "" {
		var pair string
		pair, elem = cutPair(elem)
		if pair = trimOWS(pair); pair == "" {
			continue
		}
		eq := strings.IndexByte(pair, '=')
		if eq < 0 || !validToken(pair[:eq]) {
			return "", false
		}
		v, ok := paramValue(pair[eq+1:])
		if !ok {
			return "", false
		}
		if strings.EqualFold(pair[:eq], "for") {
			if found {
				return "", false
			}
			node, found = v, true
		}
	}
	return node, found
}

// cutPair splits a Forwarded element at its first semicolon outside a
// quoted string.
func cutPair(s string) (pair, rest string) {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && inQuote:
			i++
		case c == '"':
			inQuote = !inQuote
		case c == ';' && !inQuote:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// paramValue decodes a Forwarded parameter value: a token or a quoted
// string. Unquoted values may also hold ':', '[' and ']', since some
// proxies forget to quote IPv6 nodes and ports; the node is checked
// strictly afterwards.
func paramValue(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	if v[0] != '"' {
		for i := 0; i < len(v); i++ {
			if c := v[i]; !isTokenChar(c) && c != ':' && c != '[' && c != ']' {
				return "", false
			}
		}
		return v, true
	}
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", false
	}
	inner := v[1 : len(v)-1]
	escaped := false
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			if i++; i == len(inner) || !isQuotedPairChar(inner[i]) {
				return "", false
			}
			escaped = true
		case c == '"', c < ' ' && c != '\t', c == 0x7f:
			return "", false
		}
	}
	if !escaped {
		return inner, true
	}
	if len(inner) > 2*maxNodeLen {
		return "", true // too long to be a node; not worth unescaping
	}
	b := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' {
			i++
		}
		b = append(b, inner[i])
	}
	return string(b), true
}

// isQuotedPairChar reports whether c may follow a backslash in a quoted
// string: HTAB, SP, VCHAR or obs-text.
func isQuotedPairChar(c byte) bool {
	return c == '\t' || c >= ' ' && c != 0x7f
}
