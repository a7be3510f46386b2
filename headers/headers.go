// Package headers tells the client about its rate limit: it writes the
// response header fields of a core.Decision, and parses them back on the
// client side.
//
// Four families of fields are supported, each switched on in Config:
//
//   - XRateLimit: X-RateLimit-Limit, X-RateLimit-Remaining and
//     X-RateLimit-Reset, the de facto convention of GitHub and others.
//     Reset is an absolute time, in Unix epoch seconds.
//   - Draft6: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, as
//     in draft-ietf-httpapi-ratelimit-headers-06. Reset is a delay in
//     seconds.
//   - Structured: RateLimit and RateLimit-Policy, as in
//     draft-ietf-httpapi-ratelimit-headers-10, in the Structured Field
//     syntax of RFC 9651: RateLimit: "name";r=<remaining>;t=<reset> and
//     RateLimit-Policy: "name";q=<quota>;w=<window>.
//   - RetryAfter: Retry-After (RFC 9110), in delay seconds, on denied
//     decisions only.
//
// Limit and Remaining are the Decision's: Limit is the policy's capacity
// (Burst for the buckets). Every duration is rounded up to whole seconds, so
// that a client that waits as told never comes back too early. The
// structured q and w describe the policy's rate, Policy.Limit requests per
// Policy.Window (rounded up to a whole second, at least one), for the
// buckets too: the draft registers no parameter for a bucket's burst, and
// unregistered parameters are left out, so r may exceed q on an idle
// bucket whose Burst is larger than its Limit.
//
// Nothing from the request is ever written: the values are numbers and the
// policy's Name, which core.Policy.Validate restricts to [A-Za-z0-9._-].
//
// One Writer, built with NewWriter from a Config, writes every response:
// a single limit's and a layered one's. The package imports no web
// framework: Writer.Write takes any Setter, which net/http's Header and
// fiber's Ctx both are.
package headers

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Field names in the canonical form net/http keeps them in: the keys
// under which Writer.Write sets them in an http.Header, and Parse reads
// them. Field names are case-insensitive on the wire; the writer spells
// them as the standards do ("X-RateLimit-Limit", the wire* constants)
// wherever it can.
const (
	canonXRateLimitLimit     = "X-Ratelimit-Limit"
	canonXRateLimitRemaining = "X-Ratelimit-Remaining"
	canonXRateLimitReset     = "X-Ratelimit-Reset"
	canonRateLimitLimit      = "Ratelimit-Limit"
	canonRateLimitRemaining  = "Ratelimit-Remaining"
	canonRateLimitReset      = "Ratelimit-Reset"
	canonRateLimit           = "Ratelimit"
	canonRateLimitPolicy     = "Ratelimit-Policy"
	canonRetryAfter          = "Retry-After"
)

// Setter is the one method Writer.Write needs from a response's header: both
// net/http's Header and fiber's *Ctx have it. Set replaces any value the
// field had.
type Setter interface {
	Set(key, value string)
}

// Config selects the families of fields that a Writer writes. The zero
// Config writes nothing; Default is what the flow uses when not told
// otherwise.
type Config struct {
	// XRateLimit writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, the last one in Unix epoch seconds, rounded up.
	XRateLimit bool
	// Draft6 writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, the last one in delay seconds, rounded up.
	Draft6 bool
	// Structured writes RateLimit and RateLimit-Policy, as in
	// draft-ietf-httpapi-ratelimit-headers-10.
	Structured bool
	// RetryAfter writes Retry-After on denied decisions, in delay seconds,
	// rounded up and at least 1.
	RetryAfter bool
}

// write sets the fields of the families cfg selects from d, the decision
// made at time now (the zero Time means time.Now): Writer.Write of a
// single decision, without the Writer's sharing. Only X-RateLimit-Reset
// depends on now; it is now+d.ResetAfter, rounded up to a whole second.
//
// write writes nothing at all for a decision the fail mode allowed (Source
// core.SourceFailMode, failed open): such a decision was not made by the
// store and carries no information, and a client is better told nothing
// than told a quota that does not exist.
// Retry-After is written for denied decisions only. Negative counts and
// durations, which a core.Store never returns, are written as 0; the
// structured fields are left out when the policy's Name has a byte that a
// Structured Field string cannot hold, which a validated policy never has.
//
// How the fields are set depends on h (see emit). write is safe for
// concurrent use on distinct Setters.
func write(h Setter, d *core.Decision, now time.Time, cfg Config) {
	if d.Allowed && d.Source == core.SourceFailMode {
		return
	}
	var fs fieldSet
	var space [160]byte // every field of a validated policy but long structured names
	buf := fs.build(space[:0], d, now, cfg)
	if fs.n == 0 {
		return
	}
	emit(h, &fs, buf)
}

// emit sets the fields of fs, whose values are in buf, in h.
//
// When h is a fastMap (the adapters' responses are), the fields go
// straight into its net/http Header map under the names as the standards
// spell them ("X-RateLimit-Limit", "RateLimit-Limit"), which net/http
// writes on the wire as they are: their values share one string and
// their value slices one array, in two allocations. An http.Header
// itself gets the same, but the names in canonical form
// ("X-Ratelimit-Limit"), as http.Header.Set would put them, so that Get
// finds them. A fastBytes
// (Fiber's response) gets SetBytes calls with the names as the standards
// spell them, from a reused buffer: no allocation. Any other Setter gets
// Set calls with the names as spelled and values that share one string:
// one allocation for all of them.
//
// Field names are case-insensitive on the wire, and clients that parse a
// response (net/http's among them) canonicalize them; but a server-side
// handler that looks a field up in a fastMap's map with
// http.Header.Get, which canonicalizes the name it is given, does not
// find it: read such a map with the names as spelled, or after the
// response is parsed.
func emit(h Setter, fs *fieldSet, buf []byte) {
	switch h := h.(type) {
	case fastMap:
		setMap(h.HeaderMap(), fs, buf, false)
		return
	case http.Header:
		setMap(h, fs, buf, true)
		return
	case fastBytes:
		if len(buf) <= len(bytesBuf{}) {
			// From a pooled copy: buf itself stays on the caller's stack,
			// where it could not if an interface method were given it.
			p := bytesBufs.Get().(*bytesBuf)
			b := p[:copy(p[:], buf)]
			for _, f := range fs.fields[:fs.n] {
				h.SetBytes(f.name, b[f.start:f.end])
			}
			bytesBufs.Put(p)
			return
		}
	}
	v := string(buf)
	for _, f := range fs.fields[:fs.n] {
		h.Set(f.name, v[f.start:f.end])
	}
}

// The writer's fast paths. A Setter is matched against these interfaces
// by its method set, so that a response type need not import this package
// to qualify: the adapters' responses do, and their tests assert it.

// fastBytes is a response that copies the value it is set, as
// fasthttp's header (Fiber's response) does: the writer then sets it
// every field from a buffer of its own, reused, or from text that other
// responses share, without allocating. SetBytes replaces any value the
// field had; it must neither keep value past its call nor write to it.
// SetInt sets the field to the decimal text of n, as SetBytes would.
type fastBytes interface {
	Setter
	SetBytes(key string, value []byte)
	SetInt(key string, n int64)
}

// fastIntPair is a fastBytes that also sets two fields to the decimal
// text of one number, formatted once, as SetInt of each would: a Writer
// sets both Remaining fields (X-RateLimit-Remaining, RateLimit-Remaining)
// so. Fiber's response is one.
type fastIntPair interface {
	fastBytes
	SetIntPair(key1, key2 string, n int64)
}

// fastMap is a response that lets the writer set its fields in its
// net/http Header map directly. HeaderMap returns that map, never nil.
// The net/http, Gin, Chi and Echo responses are ones.
type fastMap interface {
	Setter
	HeaderMap() http.Header
}

// bytesBuf is the buffer from which write sets a fastBytes's fields.
type bytesBuf [512]byte

// bytesBufs holds the bytesBufs not in use.
var bytesBufs = sync.Pool{New: func() any { return new(bytesBuf) }}

// Sizes of a Writer's blocks (sharedBlock): the fields of
// the HTTP flow's default Config (XRateLimit, Draft6, RetryAfter) on an
// allowed decision, with counts of up to 19 digits.
const (
	blockFields = 6
	blockBytes  = 64
)

// setMap sets the fields of fs, whose values are in buf, in h: under
// their canonical names when canonical, else as the standards spell them.
// The value slices share one array, of capacity 1 each, and the values one
// string: two allocations. (One block holding both, its text made a string
// with unsafe.String, saved an allocation but cost more: 293 against 270
// CPU-ns/op, 160 against 112 B/op, BenchmarkWrite/default/allowed/HeaderMap,
// 2026-12-07.)
func setMap(h http.Header, fs *fieldSet, buf []byte, canonical bool) {
	vals, v := make([]string, fs.n), string(buf)
	for i, f := range fs.fields[:fs.n] {
		vals[i] = v[f.start:f.end]
		name := f.name
		if canonical {
			name = canonicalName(name)
		}
		h[name] = vals[i : i+1 : i+1]
	}
}

// canonicalName returns the canonical form of a field name the writer
// spells.
func canonicalName(wire string) string {
	switch wire {
	case wireXRateLimitLimit:
		return canonXRateLimitLimit
	case wireXRateLimitRemaining:
		return canonXRateLimitRemaining
	case wireXRateLimitReset:
		return canonXRateLimitReset
	case wireRateLimitLimit:
		return canonRateLimitLimit
	case wireRateLimitRemaining:
		return canonRateLimitRemaining
	case wireRateLimitReset:
		return canonRateLimitReset
	case wireRateLimit:
		return canonRateLimit
	case wireRateLimitPolicy:
		return canonRateLimitPolicy
	}
	return canonRetryAfter
}

// Field names as the standards spell them, the spelling the writer puts
// on the wire.
const (
	wireXRateLimitLimit     = "X-RateLimit-Limit"
	wireXRateLimitRemaining = "X-RateLimit-Remaining"
	wireXRateLimitReset     = "X-RateLimit-Reset"
	wireRateLimitLimit      = "RateLimit-Limit"
	wireRateLimitRemaining  = "RateLimit-Remaining"
	wireRateLimitReset      = "RateLimit-Reset"
	wireRateLimit           = "RateLimit"
	wireRateLimitPolicy     = "RateLimit-Policy"
	wireRetryAfter          = "Retry-After"
)

// maxFields is how many fields one write sets at most.
const maxFields = 9

// field is one field of a fieldSet: its name and its value's bounds in buf.
type field struct {
	name       string
	start, end int
}

// fieldSet holds the fields of one decision; their values lie side by
// side in one buffer, which the functions building it take and return
// (held in the fieldSet, the caller's stack buffer would escape).
type fieldSet struct {
	fields [maxFields]field
	n      int
}

// push appends the field name whose value is buf[start:end].
func (fs *fieldSet) push(name string, start, end int) {
	fs.fields[fs.n] = field{name, start, end}
	fs.n++
}

// addInt appends the field name with the value n to fs and buf.
func (fs *fieldSet) addInt(buf []byte, name string, n int64) []byte {
	start := len(buf)
	buf = strconv.AppendInt(buf, n, 10)
	fs.push(name, start, len(buf))
	return buf
}

// build fills fs with the fields of d that cfg selects (see write), their
// values appended to buf, and returns buf.
func (fs *fieldSet) build(buf []byte, d *core.Decision, now time.Time, cfg Config) []byte {
	remaining := max(d.Remaining, 0)
	reset := ceilSeconds(d.ResetAfter)
	if cfg.XRateLimit || cfg.Draft6 {
		limitStart := len(buf)
		buf = strconv.AppendInt(buf, max(d.Limit, 0), 10)
		remStart := len(buf)
		buf = strconv.AppendInt(buf, remaining, 10)
		remEnd := len(buf)
		if cfg.XRateLimit {
			if now.IsZero() {
				now = time.Now()
			}
			fs.push(wireXRateLimitLimit, limitStart, remStart)
			fs.push(wireXRateLimitRemaining, remStart, remEnd)
			buf = fs.addInt(buf, wireXRateLimitReset, ceilUnix(now.Add(max(d.ResetAfter, 0))))
		}
		if cfg.Draft6 {
			fs.push(wireRateLimitLimit, limitStart, remStart)
			fs.push(wireRateLimitRemaining, remStart, remEnd)
			buf = fs.addInt(buf, wireRateLimitReset, reset)
		}
	}
	if cfg.Structured && sfStringOK(d.Policy.Name) {
		buf = fs.addStructured(buf, d.Policy, remaining, reset)
	}
	if cfg.RetryAfter && !d.Allowed {
		buf = fs.addInt(buf, wireRetryAfter, limits.RetryAfterSeconds(d.Allowed, d.RetryAfter))
	}
	return buf
}

// addStructured appends RateLimit and RateLimit-Policy to fs and buf.
// RateLimit-Policy is left out for a Decision that carries no Policy.
func (fs *fieldSet) addStructured(buf []byte, p core.Policy, remaining, reset int64) []byte {
	start := len(buf)
	buf = appendSFString(buf, p.Name)
	buf = append(buf, ";r="...)
	buf = strconv.AppendInt(buf, min(remaining, maxSFInteger), 10)
	buf = append(buf, ";t="...)
	buf = strconv.AppendInt(buf, reset, 10)
	fs.push(wireRateLimit, start, len(buf))

	if p.Limit <= 0 || p.Window <= 0 {
		return buf
	}
	start = len(buf)
	buf = appendSFString(buf, p.Name)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, min(p.Limit, maxSFInteger), 10)
	buf = append(buf, ";w="...)
	buf = strconv.AppendInt(buf, max(ceilSeconds(p.Window), 1), 10)
	fs.push(wireRateLimitPolicy, start, len(buf))
	return buf
}

// maxSFInteger is the largest Structured Field integer (RFC 9651, Section
// 3.3.1). Counts above it, which a core.Store never returns, are written as
// it; durations in seconds never reach it.
const maxSFInteger = 999_999_999_999_999

// ceilSeconds returns d in seconds, rounded up; 0 when d is not positive.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// ceilUnix returns t as Unix epoch seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// sfStringOK reports whether s can be written as a Structured Field string:
// printable ASCII only (RFC 9651, Section 3.3.3).
func sfStringOK(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// appendSFString appends s as a Structured Field string, in quotes, with
// '"' and '\' escaped. s must satisfy sfStringOK.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
