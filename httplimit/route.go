package httplimit

import (
	"fmt"
	"strings"

	"github.com/apigate/ratelimit/keyfuncs"
)

// A route is a compiled route pattern of Layer.Routes or CostByRoute.
type route struct {
	pattern  string // as given
	segs     []routeSeg
	wildcard bool // ends with "/*": matches the segments and anything below
}

// routeSeg is one segment of a route: a literal, in lower case, or a
// parameter matching any one segment.
type routeSeg struct {
	lit   string
	param bool
}

// parseRoute compiles a route pattern: "/login", "/users/{id}",
// "/users/:id", "/api/*".
func parseRoute(p string) (route, error) {
	rt := route{pattern: p}
	if p == "" || p[0] != '/' {
		return rt, fmt.Errorf("route %q does not start with '/'", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("?#\\;%", c) >= 0 {
			return rt, fmt.Errorf("route %q has a byte %q that no normalized path has", p, c)
		}
	}
	parts := strings.Split(p[1:], "/")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1] // "/login/" is "/login"
	}
	if len(parts) == 1 && parts[0] == "" {
		return rt, nil // "/"
	}
	for i, s := range parts {
		switch {
		case s == "" || s == "." || s == "..":
			return rt, fmt.Errorf("route %q has an empty, \".\" or \"..\" segment", p)
		case s[0] == '*':
			if i != len(parts)-1 {
				return rt, fmt.Errorf("route %q has a wildcard before its last segment", p)
			}
			rt.wildcard = true
		case s[0] == ':' && len(s) > 1, s[0] == '{' && s[len(s)-1] == '}' && len(s) > 2:
			rt.segs = append(rt.segs, routeSeg{param: true})
		case strings.ContainsAny(s, "{}*") || s[0] == ':':
			return rt, fmt.Errorf("route %q has a malformed segment %q", p, s)
		default:
			rt.segs = append(rt.segs, routeSeg{lit: strings.ToLower(s)})
		}
	}
	return rt, nil
}

// compareSpecificity orders routes most specific first: without a
// wildcard before with one, more segments before fewer, fewer parameters
// before more.
func (rt *route) compareSpecificity(o *route) int {
	if rt.wildcard != o.wildcard {
		if rt.wildcard {
			return 1
		}
		return -1
	}
	if len(rt.segs) != len(o.segs) {
		return len(o.segs) - len(rt.segs)
	}
	return rt.params() - o.params()
}

// params is how many parameter segments rt has.
func (rt *route) params() int {
	n := 0
	for _, s := range rt.segs {
		if s.param {
			n++
		}
	}
	return n
}

// matchSegs reports whether the path p matches rt.
func (rt *route) matchSegs(p *pathSegs) bool {
	if rt.wildcard {
		if p.ns < len(rt.segs) {
			return false
		}
	} else if p.ns != len(rt.segs) {
		return false
	}
	b := p.bytes()
	for i := range rt.segs {
		if rt.segs[i].param {
			continue
		}
		s := p.seg(i)
		if !equalLower(b[s.start:s.end], rt.segs[i].lit) {
			return false
		}
	}
	return true
}

// equalLower reports whether b, ASCII letters folded to lower case, is
// lower.
func equalLower(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// Sizes of a pathSegs' own arrays; longer paths use the heap.
const (
	pathBuf = 512
	maxSegs = 32
)

// seg is the bounds of one segment in a pathSegs' bytes.
type seg struct{ start, end int32 }

// pathSegs is a normalized path, split in segments (see Layer).
type pathSegs struct {
	buf  [pathBuf]byte
	big  []byte // the path, when longer than buf
	n    int    // its length in buf
	segs [maxSegs]seg
	more []seg // segments past maxSegs
	ns   int
}

// bytes returns the normalized path's bytes.
func (p *pathSegs) bytes() []byte {
	if p.big != nil {
		return p.big
	}
	return p.buf[:p.n]
}

// seg returns the i-th segment's bounds.
func (p *pathSegs) seg(i int) seg {
	if i < maxSegs {
		return p.segs[i]
	}
	return p.more[i-maxSegs]
}

// push appends a segment.
func (p *pathSegs) push(s seg) {
	if p.ns < maxSegs {
		p.segs[p.ns] = s
	} else {
		p.more = append(p.more, s)
	}
	p.ns++
}

// pop drops the last segment, if any.
func (p *pathSegs) pop() {
	if p.ns == 0 {
		return
	}
	p.ns--
	if p.ns >= maxSegs {
		p.more = p.more[:p.ns-maxSegs]
	}
}

// maxUnescapes is how many rounds of percent-decoding a path gets: a path
// encoded twice ("%256Cogin") is decoded too.
const maxUnescapes = 3

// set normalizes path into p: cut at '?' and '#', percent-decoded,
// backslashes as slashes, split in segments each cut at ';', empty and
// "." segments dropped, ".." resolved.
func (p *pathSegs) set(path string) {
	p.big, p.more, p.n, p.ns = nil, p.more[:0], 0, 0
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	var b []byte
	if len(path) <= pathBuf {
		b = append(p.buf[:0], path...)
	} else {
		b = []byte(path)
	}
	for range maxUnescapes {
		var changed bool
		if b, changed = unescape(b); !changed {
			break
		}
	}
	for i, c := range b {
		if c == '?' || c == '#' {
			b = b[:i]
			break
		}
	}
	if len(path) <= pathBuf {
		p.n = len(b)
	} else {
		p.big = b
	}
	for i := 0; i <= len(b); {
		j := i
		for j < len(b) && b[j] != '/' && b[j] != '\\' {
			j++
		}
		end := j
		for k := i; k < j; k++ {
			if b[k] == ';' {
				end = k
				break
			}
		}
		switch s := b[i:end]; {
		case len(s) == 0, len(s) == 1 && s[0] == '.':
		case len(s) == 2 && s[0] == '.' && s[1] == '.':
			p.pop()
		default:
			p.push(seg{int32(i), int32(end)})
		}
		i = j + 1
	}
}

// unescape percent-decodes b in place, and reports whether it decoded
// anything. A '%' not followed by two hex digits stays as it is.
func unescape(b []byte) ([]byte, bool) {
	w := 0
	changed := false
	for r := 0; r < len(b); r++ {
		if b[r] == '%' && r+2 < len(b) && ishex(b[r+1]) && ishex(b[r+2]) {
			b[w] = unhex(b[r+1])<<4 | unhex(b[r+2])
			r += 2
			changed = true
		} else {
			b[w] = b[r]
		}
		w++
	}
	return b[:w], changed
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// maxRouteLen is the longest Route pattern matched, keyfuncs' bound on a
// route pattern (keyfuncs.Route).
const maxRouteLen = 1024

// matcher matches one request against routes: its normalized path (a
// keyfuncs.Request.Path, when not ""), else its Route pattern, worked out once, when a route
// first needs it.
type matcher struct {
	r                   keyfuncs.Request
	path, route         pathSegs
	pathDone, routeDone bool
	hasPath, hasRoute   bool
}

// init readies m for r.
func (m *matcher) init(r keyfuncs.Request) {
	m.r = r
	m.pathDone, m.routeDone, m.hasPath, m.hasRoute = false, false, false, false
}

// reset drops what m holds of its request.
func (m *matcher) reset() {
	m.r = nil
	m.path.big, m.route.big = nil, nil
	m.path.more, m.route.more = nil, nil
}

// matches reports whether the request matches rt, by its path, or by its
// Route pattern when it has no path.
func (m *matcher) matches(rt *route) bool {
	if !m.pathDone {
		m.pathDone = true
		if p := m.r.Path(); p != "" {
			m.path.set(p)
			m.hasPath = true
		}
	}
	if m.hasPath {
		// The path is what the router routes on: its Route pattern, which
		// some routers work out at a cost (chi's tree walk), adds nothing.
		return rt.matchSegs(&m.path)
	}
	if !m.routeDone {
		m.routeDone = true
		if s := m.r.Route(); s != "" && len(s) <= maxRouteLen {
			m.route.set(s)
			m.hasRoute = true
		}
	}
	return m.hasRoute && rt.matchSegs(&m.route)
}
