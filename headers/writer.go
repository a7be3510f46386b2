package headers

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/apigate/ratelimit/core"
)

// Writer writes the rate-limit fields of the families of one Config on
// responses, for a single limit and for layered ones. Build it with
// [NewWriter]; it is safe for concurrent use.
//
// It sets the fields under the names as the standards spell them
// ("X-RateLimit-Limit"), which net/http writes on the wire as they are,
// but in an http.Header, which gets the canonical names
// ("X-Ratelimit-Limit") as http.Header.Set would. A Setter that also has
// HeaderMap() http.Header, never nil, gets them set in that map directly:
// http.Header.Get, which canonicalizes the name it is given, does not find
// them there. One that also has SetBytes(key string, value []byte) and
// SetInt(key string, n int64), copying what it is set as fasthttp does,
// is written without allocating (both Remaining fields with one
// SetIntPair(key1, key2 string, n int64) when it has that too).
type Writer struct {
	// A Writer has a memory: on a header map it shares the text of the
	// values that change seldom (Limit, and the Reset fields) with the
	// last response that had the same ones (last), and formats only
	// Remaining: one allocation a response, for its value slices and
	// their text; none for a fastBytes. Any other Setter gets Set calls
	// whose values share one string: one allocation for all of them.
	// Retry-After is limits.RetryAfterSeconds(d.Allowed, d.RetryAfter).
	cfg  Config
	last atomic.Pointer[sharedBlock] // the last block that formatted all its values
	wall atomic.Pointer[wallReading] // the last reading of the wall clock, for nowUnixNano
}

// NewWriter returns the Writer of cfg.
func NewWriter(cfg Config) *Writer { return &Writer{cfg: cfg} }

// sharedBlock holds the value slices and the text of the fields one
// Writer.Write sets in a header map, in one allocation, with the numbers
// its values were formatted from; it may become the Writer's last block,
// whose text later responses share. Its strings point into its own text
// only. A leanBlock's and a partBlock's point into their own text or
// into the last block's, and they never become the last one, so no chain of blocks is ever kept
// alive. No text is written once a value points into it.
type sharedBlock struct {
	limit, xreset, reset int64
	vals                 [blockFields]string
	buf                  [blockBytes]byte
	// ends are where Limit's text ends in buf, X-RateLimit-Reset's, and
	// RateLimit-Reset's (each starting where the one before ends), for
	// a fastBytes's SetBytes. The three fit in buf, so that format never
	// moves them out of it: 49 bytes at most (Limit's 19 digits, a
	// negative X-RateLimit-Reset's 20, and RateLimit-Reset's 10, the
	// seconds of a time.Duration).
	ends [3]uint8
}

// leanBlock is a block that borrows Limit and Reset from the Writer's
// last sharedBlock: its own text is Remaining's.
type leanBlock struct {
	vals [blockFields]string
	buf  [16]byte // Remaining below 10^16; a larger one has text of its own
}

// partBlock is a block that borrows Limit from the Writer's last
// sharedBlock: its own text is Remaining's and the resets'.
type partBlock struct {
	vals [blockFields]string
	buf  [48]byte
}

// Write sets, in h, the fields of the Writer's Config that tell the
// client about d, the binding decision of a request, made at time now.
// X-RateLimit-*, RateLimit-* (draft 6) and, on a denial, Retry-After
// describe d; X-RateLimit-Reset is now+d.ResetAfter rounded up to a
// second. The draft-10 RateLimit and RateLimit-Policy fields have one item
// per layer of layers, named by its Policy.Name, d's first and not twice:
// RateLimit: "ip";r=12;t=42, "global";r=999990;t=42. layers holds the
// decisions of every layer that applied (as core.Limiter.AllowLayers fills
// them), nil for a single limit.
//
// Nothing is written for a decision the fail mode allowed (d.Source is
// core.SourceFailMode), which tells nothing true; negative numbers are
// written as 0. A zero now is the current time; a now with a monotonic
// clock reading is put on the wall clock by a reading at most a second
// old (docs/headers.md); any other now is used as it is.
func (w *Writer) Write(h Setter, d core.Decision, layers []core.Decision, now time.Time) {
	if d.Allowed && d.Source == core.SourceFailMode {
		return
	}
	if !now.IsZero() && now != now.Round(0) {
		now = time.Unix(0, w.unixNanoAt(now))
	}
	cfg := w.cfg
	if cfg.Structured && len(layers) > 1 {
		if now.IsZero() && cfg.XRateLimit {
			now = time.Unix(0, w.nowUnixNano())
		}
		writeLayers(h, &d, layers, now, cfg)
		return
	}
	if (!cfg.XRateLimit && !cfg.Draft6) || cfg.Structured || (cfg.RetryAfter && !d.Allowed) {
		write(h, &d, now, cfg)
		return
	}
	switch m := h.(type) {
	case fastMap:
		w.writeMap(m.HeaderMap(), &d, now, false)
	case http.Header:
		w.writeMap(m, &d, now, true)
	case fastBytes:
		w.writeBytes(m, &d, now)
	default:
		write(h, &d, now, cfg)
	}
}

// numbers returns the values of d that a sharedBlock remembers: Limit,
// X-RateLimit-Reset (0 unless written) and RateLimit-Reset.
func (w *Writer) numbers(d *core.Decision, now time.Time) (lim, xreset, reset int64) {
	lim, reset = max(d.Limit, 0), ceilSeconds(d.ResetAfter)
	if w.cfg.XRateLimit {
		after := max(d.ResetAfter, 0)
		switch {
		case !now.IsZero():
			xreset = ceilUnix(now.Add(after))
		case after < maxFastReset:
			// ceilUnix of the time, in Unix nanoseconds (positive).
			ns := w.nowUnixNano() + int64(after)
			xreset = ns / 1e9
			if ns%1e9 != 0 {
				xreset++
			}
		default:
			xreset = ceilUnix(time.Unix(0, w.nowUnixNano()).Add(after))
		}
	}
	return lim, xreset, reset
}

// maxFastReset bounds the ResetAfter that numbers adds to the time in
// Unix nanoseconds, far from overflowing them.
const maxFastReset = 1 << 60 // 36 years

// wallReading is a reading of the wall clock, with its monotonic clock.
type wallReading struct {
	at     time.Time
	unixNs int64
}

// nowUnixNano returns the current time in Unix nanoseconds: the last
// reading of the wall clock, when it is less than a second old, advanced
// by the monotonic clock, which costs half a reading of both. The wall
// clock is read again every second, so that a step of it is followed
// within a second.
func (w *Writer) nowUnixNano() int64 {
	if r := w.wall.Load(); r != nil {
		if e := time.Since(r.at); e >= 0 && e < time.Second {
			return r.unixNs + int64(e)
		}
	}
	t := time.Now()
	w.wall.Store(&wallReading{at: t, unixNs: t.UnixNano()})
	return t.UnixNano()
}

// unixNanoAt returns the time t, which carries a monotonic clock reading,
// in Unix nanoseconds: the Writer's last reading of the wall clock moved by
// the monotonic clock to t. When t is within a second after that reading
// (a decision just made), the reading is recent enough and the clock is
// not read; otherwise the reading is first renewed if it is a second old
// (nowUnixNano), and t taken from it. So a time whose wall reading was
// fixed long ago (the memory store's clock) does not carry a step of the
// wall clock since into X-RateLimit-Reset.
func (w *Writer) unixNanoAt(t time.Time) int64 {
	if r := w.wall.Load(); r != nil {
		if e := t.Sub(r.at); e >= 0 && e < time.Second {
			return r.unixNs + int64(e)
		}
	}
	w.nowUnixNano()
	r := w.wall.Load() // not nil: nowUnixNano stores a reading when there is none
	return r.unixNs + int64(t.Sub(r.at))
}

// same reports whether b holds the text of these numbers.
func (b *sharedBlock) same(lim, xreset, reset int64) bool {
	return b != nil && b.limit == lim && b.xreset == xreset && b.reset == reset
}

// later reports whether numbers of the same Limit as b's reset later than
// b's: they displace b as the Writer's last block, and a decision that
// moves the reset backwards (a client whose bucket is fuller than the
// last one's) does not, so that clients of different fill levels do not
// take turns.
func (b *sharedBlock) later(xreset, reset int64) bool {
	return xreset > b.xreset || xreset == b.xreset && reset > b.reset
}

// format fills b's values but Remaining's from its numbers, and returns
// the rest of its text.
func (b *sharedBlock) format(cfg Config) []byte {
	text := b.buf[:0]
	var limitText, xresetText, resetText string
	limitText, text = appendValue(text, b.limit)
	b.ends[0] = uint8(len(text))
	if cfg.XRateLimit {
		xresetText, text = appendValue(text, b.xreset)
	}
	b.ends[1] = uint8(len(text))
	if cfg.Draft6 {
		resetText, text = appendValue(text, b.reset)
	}
	b.ends[2] = uint8(len(text))
	b.vals = [blockFields]string{limitText, "", xresetText, limitText, "", resetText}
	return text
}

// writeMap is Writer.Write of X-RateLimit-* and RateLimit-*, the families of
// w.cfg (at least one of them, and only them), in m.
func (w *Writer) writeMap(m http.Header, d *core.Decision, now time.Time, canonical bool) {
	cfg := w.cfg
	lim, xreset, reset := w.numbers(d, now)
	// vals[0] is Limit, vals[1] Remaining, vals[2] X-RateLimit-Reset,
	// vals[5] RateLimit-Reset, whichever families are written, so that a
	// later block finds them.
	var vals *[blockFields]string
	switch last := w.last.Load(); {
	case last.same(lim, xreset, reset):
		b := new(leanBlock)
		remaining, _ := appendValue(b.buf[:0], max(d.Remaining, 0))
		l := &last.vals
		b.vals = [blockFields]string{l[0], remaining, l[2], l[3], remaining, l[5]}
		vals = &b.vals
	case last != nil && last.limit == lim && !last.later(xreset, reset):
		// Another client's reset, earlier than the last block's: Limit
		// is borrowed, the rest formatted.
		b := new(partBlock)
		text := b.buf[:0]
		var xresetText, resetText, remaining string
		if cfg.XRateLimit {
			xresetText, text = appendValue(text, xreset)
		}
		if cfg.Draft6 {
			resetText, text = appendValue(text, reset)
		}
		remaining, _ = appendValue(text, max(d.Remaining, 0))
		l := &last.vals
		b.vals = [blockFields]string{l[0], remaining, xresetText, l[3], remaining, resetText}
		vals = &b.vals
	default:
		b := &sharedBlock{limit: lim, xreset: xreset, reset: reset}
		remaining, _ := appendValue(b.format(cfg), max(d.Remaining, 0))
		b.vals[1], b.vals[4] = remaining, remaining
		vals = &b.vals
		w.last.Store(b)
	}
	if cfg.XRateLimit {
		set(m, wireXRateLimitLimit, vals[0:1:1], canonical)
		set(m, wireXRateLimitRemaining, vals[1:2:2], canonical)
		set(m, wireXRateLimitReset, vals[2:3:3], canonical)
	}
	if cfg.Draft6 {
		set(m, wireRateLimitLimit, vals[3:4:4], canonical)
		set(m, wireRateLimitRemaining, vals[4:5:5], canonical)
		set(m, wireRateLimitReset, vals[5:6:6], canonical)
	}
}

// writeBytes is writeMap for a fastBytes, which copies what it is set:
// the values the last block holds are set from its text, the others with
// SetInt, without allocating. Only a decision that resets later, under
// the same Limit, makes a new last block (one allocation); a Writer whose
// last block has another Limit keeps it, for a client of another limit (a
// policy source's plan) could take turns with it.
func (w *Writer) writeBytes(h fastBytes, d *core.Decision, now time.Time) {
	cfg := w.cfg
	lim, xreset, reset := w.numbers(d, now)
	remaining := max(d.Remaining, 0)
	last := w.last.Load()
	if !last.same(lim, xreset, reset) {
		if last != nil && (last.limit != lim || !last.later(xreset, reset)) {
			if cfg.XRateLimit {
				h.SetInt(wireXRateLimitLimit, lim)
				h.SetInt(wireXRateLimitRemaining, remaining)
				h.SetInt(wireXRateLimitReset, xreset)
			}
			if cfg.Draft6 {
				h.SetInt(wireRateLimitLimit, lim)
				h.SetInt(wireRateLimitRemaining, remaining)
				h.SetInt(wireRateLimitReset, reset)
			}
			return
		}
		last = &sharedBlock{limit: lim, xreset: xreset, reset: reset}
		last.format(cfg)
		w.last.Store(last)
	}
	if p, ok := h.(fastIntPair); ok && cfg.XRateLimit && cfg.Draft6 {
		// Remaining formatted once, for both families, in the order
		// X-RateLimit-Limit, -Remaining, RateLimit-Remaining, then the
		// rest.
		p.SetBytes(wireXRateLimitLimit, last.limitText())
		p.SetIntPair(wireXRateLimitRemaining, wireRateLimitRemaining, remaining)
		p.SetBytes(wireXRateLimitReset, last.xresetText())
		p.SetBytes(wireRateLimitLimit, last.limitText())
		p.SetBytes(wireRateLimitReset, last.resetText())
		return
	}
	if cfg.XRateLimit {
		h.SetBytes(wireXRateLimitLimit, last.limitText())
		h.SetInt(wireXRateLimitRemaining, remaining)
		h.SetBytes(wireXRateLimitReset, last.xresetText())
	}
	if cfg.Draft6 {
		h.SetBytes(wireRateLimitLimit, last.limitText())
		h.SetInt(wireRateLimitRemaining, remaining)
		h.SetBytes(wireRateLimitReset, last.resetText())
	}
}

// limitText, xresetText and resetText are the text of b's Limit,
// X-RateLimit-Reset and RateLimit-Reset, never written: a fastBytes
// copies them.
func (b *sharedBlock) limitText() []byte  { return b.buf[:b.ends[0]] }
func (b *sharedBlock) xresetText() []byte { return b.buf[b.ends[0]:b.ends[1]] }
func (b *sharedBlock) resetText() []byte  { return b.buf[b.ends[1]:b.ends[2]] }

// set sets m's field name, canonicalized when canonical, to vals.
func set(m http.Header, name string, vals []string, canonical bool) {
	if canonical {
		name = canonicalName(name)
	}
	m[name] = vals
}

// appendValue appends n to text and returns it as a string, with text:
// the string shares text's array, which must never be written again
// where the string lies.
func appendValue(text []byte, n int64) (string, []byte) {
	start := len(text)
	text = strconv.AppendInt(text, n, 10)
	// unsafe: a block's values share its text, so that a response costs one
	// allocation, not one more per value formatted (string(text[start:])):
	// 148 against 173 CPU-ns/op and 1 against 2 allocs/op, and 260 against
	// 341 and 1 against 3 for clients taking turns (go test -run '^$'
	// -bench 'Writer$/default/HeaderMap/(clients/)?Writer$' ./headers,
	// median of 6 alternating runs, 2026-12-07).
	return unsafe.String(&text[start], len(text)-start), text
}
