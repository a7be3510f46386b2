package memstore

import (
	"math"
	"time"

	"github.com/apigate/ratelimit/core"
)

// This file is the reference arithmetic of the five algorithms. Times are
// integer microseconds since the Unix epoch; counts are integers; the bucket
// levels are float64, computed in exactly the order the Redis Lua scripts in
// core/redisstore compute them (Lua numbers are float64 too), so both stores
// give the same Decision for the same history, to the millisecond.
//
// The float64(...) conversions of values that are already float64 keep the
// two bit-identical: do not remove them, whatever a linter (unconvert)
// says. Lua rounds the result of every operation. The Go spec lets a
// compiler fuse operations and round once, and Go does: x*y+z becomes one
// multiply-add on arm64, riscv64, loong64, ppc64, s390x and amd64 with
// GOAMD64=v3, skipping the product's rounding, so the last bit may differ
// from Lua's and a Decision be a millisecond off. An explicit conversion
// forbids that ("An explicit floating-point type conversion rounds to the
// precision of the target type, preventing fusion that would discard that
// rounding"), so every product or sum below whose result feeds another
// operation is wrapped in float64(...). Today none of these expressions
// would fuse without them (every product is divided before anything is
// added to it: the assembly for those architectures has no multiply-add),
// but an edit that adds to a product would; wrap any new intermediate
// result the same way.

// kind is an Algorithm as a small integer, so that deciding for existing
// state dispatches without comparing strings.
type kind uint8

const (
	unknownKind kind = iota
	fixedWindowKind
	slidingLogKind
	slidingCounterKind
	tokenBucketKind
	leakyBucketKind
)

// kindOf returns the kind of a, or unknownKind.
func kindOf(a core.Algorithm) kind {
	switch a {
	case core.FixedWindow:
		return fixedWindowKind
	case core.SlidingWindowLog:
		return slidingLogKind
	case core.SlidingWindowCounter:
		return slidingCounterKind
	case core.TokenBucket:
		return tokenBucketKind
	case core.LeakyBucket:
		return leakyBucketKind
	}
	return unknownKind
}

// state is one key's state under one policy. Each algorithm uses its own
// fields.
type state struct {
	// fixed and sliding window counter: the window start, its count and
	// the count of the window before it.
	win, cur, prev int64
	// the buckets' level, the units used (tokens taken, units queued), as
	// of last.
	level float64
	// last is the time of the last admission, for every algorithm. A
	// request that arrives with an earlier time (a clock stepping back) is
	// decided at last instead, so that stepping back never frees quota.
	last int64
	// expires is when the state stops mattering: from then on it decides
	// like no state at all.
	expires int64
	// log is the sliding window log's admitted units, allocated by its
	// first request; nil for the other algorithms, which keeps their state
	// small.
	log *unitLog
	// capacity is the policy's capacity, for eviction to weigh what the
	// state holds back (see worth); set when the state is created, or
	// reused once expired.
	capacity float32
	// kind is the policy's algorithm, set when the state is created. The
	// algorithm is part of the state's identity, so it never changes.
	kind kind
}

// worth is the share of its policy's capacity (or of worthUnits, if that
// is less) that st still holds back at now, which it has not expired at:
// what evicting it would give its client early. Each algorithm's window
// or rate is known from the state's own times: the sliding counter's
// window is half its lifetime, and a bucket's debt drains linearly to
// nothing at expires. The sliding log counts the
// units logged, some of which may have left the window.
//
// What is held back is counted in whole units, rounded up, as admission
// counts it: a bucket that has drained a fraction of a unit since its
// last admission still admits nothing more, and forgetting it gives its
// client as much as forgetting a fuller one. So a flood of states each
// at its limit ties with an older state at its limit, which is then kept
// as the older (see cheaper), for the buckets as for the windows.
func (st *state) worth(now int64) float64 {
	if st.kind&lockBit != 0 {
		return st.lockWorth(now)
	}
	var used float64
	decay := 1.0
	if span := st.expires - st.last; span > 0 && now > st.last {
		decay = float64(st.expires-now) / float64(span)
	}
	switch st.kind {
	case fixedWindowKind:
		used = float64(st.cur)
	case slidingCounterKind:
		w := (st.expires - st.win) / 2
		if el := max(now-st.win, 0); el < w {
			used = weigh(st.prev, w, el) + float64(st.cur)
		} else {
			used = weigh(st.cur, w, min(el-w, w))
		}
	case slidingLogKind:
		if st.log != nil {
			used = float64(st.log.units())
		}
	case tokenBucketKind, leakyBucketKind:
		used = st.level * decay
	}
	// The slack keeps float64 rounding (3.0000000001 units) from counting
	// a unit more.
	used = math.Ceil(used - wholeUnitSlack)
	if st.capacity <= 0 { // not made by shard.take
		return used
	}
	return used / min(float64(st.capacity), worthUnits)
}

// wholeUnitSlack is how far above a whole number of units worth still
// counts that number.
const wholeUnitSlack = 1e-6

// worthUnits is how many units a state holds back to be worth as much as
// a client at its limit: the share worth weighs is of the policy's
// capacity or of worthUnits, whichever is less. Forgetting a hundred
// units of a large policy (a global layer's one shared key, at 1,000,000
// an hour) gives back as many requests as forgetting a hundred one-request
// clients: by its share of its own capacity alone such a key would be
// worth less than one new key of a 300 a minute policy, and a flood of new
// addresses would evict it over and over, so that its limit was never
// enforced.
const worthUnits = 100

// clear makes st decide like no state at all, keeping its kind and its
// log's array (shrink bounds it).
func (st *state) clear() {
	*st = state{kind: st.kind, log: st.log}
	if st.log != nil {
		st.log.entries, st.log.head = st.log.entries[:0], 0
	}
}

// outcome is a decision in microseconds, before rounding to milliseconds.
// It has four fields, so that the compiler keeps it in registers.
type outcome struct {
	allowed   bool
	remaining int64
	reset     int64 // µs
	// wait is, in µs, the Delay of an admitted request (leaky bucket) or
	// the RetryAfter of a denied one.
	wait int64
}

// decide fills d with o, rounded up to whole milliseconds: every field a
// store decides (see core.Store.Take), LockedOut false. It sets d field
// by field, so that Take writes its result in place: building a Decision
// and copying it costs a store-forwarding stall, and clearing it first a
// store of each byte.
func (o outcome) decide(d *core.Decision, capacity int64) {
	d.Allowed, d.LockedOut, d.Shadowed = o.allowed, false, false
	d.Limit = capacity
	d.Remaining = o.remaining
	d.ResetAfter = msUp(o.reset)
	d.Delay, d.RetryAfter = 0, 0
	if o.allowed {
		d.Delay = msUp(o.wait)
	} else {
		d.RetryAfter = msUp(o.wait)
	}
}

// step decides one request of cost c at now (µs) against st, by the
// algorithm of st.kind (which must be p's), updating st when the request is
// admitted. fresh says st holds no state yet.
//
// c == 0 is a peek (core.Store.Peek): each algorithm tests admission as
// for a cost of 1 (ask), reports what is left and the reset of the state
// as it stands, and writes nothing to st.
func step(st *state, fresh bool, p *core.Policy, c, now int64) outcome {
	w := p.Window.Microseconds()
	if !fresh && now < st.last {
		now = st.last
	}
	// b is limits.Capacity(p.Algorithm, p.Limit, p.Burst) for the buckets, without its string comparisons.
	b := p.Limit
	if p.Burst > 0 {
		b = p.Burst
	}
	switch st.kind {
	case fixedWindowKind:
		return fixedWindow(st, fresh, p.Limit, w, c, now)
	case slidingLogKind:
		return slidingLog(st, p.Limit, w, c, now)
	case slidingCounterKind:
		return slidingCounter(st, fresh, p.Limit, w, c, now)
	case tokenBucketKind:
		return tokenBucket(st, fresh, p.Limit, b, w, c, now)
	default:
		return leakyBucket(st, fresh, p.Limit, b, w, c, now)
	}
}

func fixedWindow(st *state, fresh bool, l, w, c, now int64) outcome {
	ws := now - now%w
	var n int64
	if !fresh && st.win == ws {
		n = st.cur
	}
	o := outcome{}
	if n+max(c, 1) <= l {
		o.allowed = true
		if c > 0 {
			n += c
			st.win, st.cur, st.last, st.expires = ws, n, now, ws+w
		}
	} else {
		o.wait = ws + w - now
	}
	// n exceeds l when the client was moved to a smaller plan.
	o.remaining = max(0, l-n)
	if n > 0 {
		o.reset = ws + w - now
	}
	return o
}

func slidingCounter(st *state, fresh bool, l, w, c, now int64) outcome {
	ws := now - now%w
	var cur, prev int64
	switch {
	case fresh:
	case st.win == ws:
		cur, prev = st.cur, st.prev
	case st.win == ws-w:
		prev = st.cur
	}
	el := now - ws
	// Lua: local previous_weight = weigh(previous, elapsed)
	p := weigh(prev, w, el)
	o := outcome{}
	peek := c == 0
	c = max(c, 1)
	if fits(p, cur, c, l) {
		o.allowed = true
		if !peek {
			cur += c
			st.win, st.cur, st.prev, st.last, st.expires = ws, cur, prev, now, ws+2*w
		}
	} else if need := l - cur - c; need >= 0 {
		// The previous window's weight blocks. It decays to nothing at
		// the window's end, where cur+c <= l passes: find the first el
		// at which the test itself passes. The estimate solves
		// prev*(w-el)/w + cur = the largest real sum that the two
		// roundings of fits still admit (sumBound), not l-c: at large
		// limits the sums round to steps worth many microseconds of
		// decay, and the half step is where they change.
		est := counterEstimate(prev, w, float64(sumBound(l, c, true)-float64(cur)))
		at := firstPass(el, w, est, func(at int64) bool { return fits(weigh(prev, w, at), cur, c, l) })
		o.wait = ws + at - now
	} else {
		// This window's own count blocks: wait into the next window, where
		// cur becomes the previous count and the new window starts empty.
		// The weight is a float already: one rounding, of its sum with c.
		est := counterEstimate(cur, w, sumBound(l, c, false))
		at := firstPass(0, w, est, func(at int64) bool { return fits(weigh(cur, w, at), 0, c, l) })
		o.wait = ws + w + at - now
	}
	// float64(...) forces roundings, as in Lua: see the top of this file.
	o.remaining = max(0, int64(math.Floor(float64(l)-float64(p+float64(cur)))))
	switch {
	case cur > 0:
		o.reset = ws + 2*w - now
	case prev > 0:
		o.reset = ws + w - now
	}
	return o
}

// weigh is the previous window's count weighed by the part of it still
// inside the sliding window, el microseconds into the current one. At
// el = 0 it is prev itself, which prev*w/w may round away from: weigh then
// never grows with el, nor across a window's end (where this window's
// count, weighing up to cur before it, weighs exactly cur after it), so
// the admission test never fails again once it has passed, and RetryAfter
// can be the first moment it passes.
func weigh(prev, w, el int64) float64 {
	if el == 0 {
		return float64(prev)
	}
	// float64(...) forces roundings, as in Lua: see the top of this file.
	return float64(float64(prev) * float64(w-el) / float64(w))
}

// fits is the sliding window counter's admission test.
func fits(p float64, cur, c, l int64) bool {
	// float64(...) forces roundings, as in Lua: see the top of this file.
	return float64(p+float64(cur))+float64(c) <= float64(l)
}

func slidingLog(st *state, l, w, c, now int64) outcome {
	if c == 0 {
		return peekLog(st.log, l, w, now)
	}
	if st.log == nil {
		st.log = new(unitLog)
	}
	lg := st.log
	// Forget units admitted at or before now-w.
	lg.forget(now - w)
	n := lg.units()
	o := outcome{}
	if n+c <= l {
		lg.add(now, c)
		n += c
		st.last, st.expires = now, now+w
		o.allowed = true
	} else {
		// The k-th oldest unit must leave the window first.
		o.wait = lg.unitAt(n+c-l) + w - now
	}
	// n exceeds l when the client was moved to a smaller plan.
	o.remaining = max(0, l-n)
	if n > 0 {
		o.reset = lg.entries[len(lg.entries)-1].at + w - now
	}
	lg.shrink()
	return o
}

// peekLog is slidingLog's peek: it counts what lg holds in the window
// without forgetting the rest (a view of lg moves its head, lg keeps its
// own), and adds nothing.
func peekLog(lg *unitLog, l, w, now int64) outcome {
	if lg == nil {
		return outcome{allowed: true, remaining: l}
	}
	v := unitLog{entries: lg.entries, head: lg.head}
	if live := v.entries[v.head:]; len(live) > 0 && live[0].at <= now-w {
		v.head += gallop(len(live), func(i int) bool { return live[i].at <= now-w })
	}
	n := v.units()
	o := outcome{allowed: n+1 <= l, remaining: max(0, l-n)}
	if !o.allowed {
		o.wait = v.unitAt(n+1-l) + w - now
	}
	if n > 0 {
		o.reset = v.entries[len(v.entries)-1].at + w - now
	}
	return o
}

// horizon bounds a bucket's reset and wait, in microseconds: 2^52 (about
// 142 years), as in the Redis scripts (prelude.lua), where a longer search
// could not step by a microsecond. A bucket filled under a fast plan and
// decided under a slow one (an override that cuts 10,000,000 an hour to 1)
// may hold centuries of usage, past what a time.Duration holds.
const horizon = 1 << 52

func tokenBucket(st *state, fresh bool, l, b, w, c, now int64) outcome {
	return bucket(st, fresh, l, b, w, c, now, false)
}

func leakyBucket(st *state, fresh bool, l, b, w, c, now int64) outcome {
	return bucket(st, fresh, l, b, w, c, now, true)
}

// bucket is the arithmetic of both buckets, which keep the same state: the
// level, the units used (the tokens taken from a token bucket, the units
// queued in a leaky one), drained at l per w since the last admission. A
// request passes when the level has room for c more below b. shape makes
// it the leaky bucket's, whose admitted request waits Delay, the queue
// ahead of it; the token bucket's is let through at once.
//
// The level is the usage, not what is left of b, so that a client moved to
// another plan (the same Name and Algorithm, another Limit or Burst) keeps
// it: moved to a smaller b it is denied until its level has drained below
// that b, moved to a larger one it has the room at once. The level drains
// at the rate of the plan in force, and is forgotten when it has drained at
// that rate, or at st.expires, when the plan that wrote it would have
// forgotten it, whichever comes first: the Redis scripts forget it at the
// first moment too, and at the second by the key's TTL.
func bucket(st *state, fresh bool, l, b, w, c, now int64, shape bool) outcome {
	// levelAt is the level el microseconds after the last admission.
	// Here and below, float64(...) forces roundings, as in Lua: see the
	// top of this file.
	levelAt := func(el int64) float64 {
		// Lua: math.max(0, stored_level - elapsed * limit / window)
		return max(0, st.level-float64(float64(el)*float64(l)/float64(w)))
	}
	expires := st.expires
	level := 0.0
	if !fresh {
		// Lua: last + math.ceil(stored_level * window / limit): when the
		// level has drained at this plan's rate. It is st.expires under
		// the plan that wrote the state.
		expires = min(expires, st.last+int64(math.Ceil(st.level*float64(w)/float64(l))))
		if now >= expires {
			fresh = true // decides like no state at all
		} else {
			level = levelAt(now - st.last)
		}
	}
	o := outcome{}
	peek := c == 0
	c = max(c, 1)
	if float64(level+float64(c)) <= float64(b) {
		if shape {
			o.wait = int64(math.Ceil(level * float64(w) / float64(l)))
		}
		if !peek {
			level += float64(c)
		}
		o.allowed = true
	} else {
		// Not fresh: an empty bucket has room for c <= b, and the state
		// decides like none from expires on.
		el := now - st.last
		est := leakyEstimate(st.level, l, b, w, c) - el
		o.wait = firstPass(0, min(expires-now, horizon), est, func(k int64) bool { return float64(levelAt(el+k)+float64(c)) <= float64(b) })
	}
	// The level exceeds b when the client was moved to a smaller plan.
	o.remaining = max(0, int64(math.Floor(float64(b)-level)))
	o.reset = min(int64(math.Ceil(level*float64(w)/float64(l))), horizon)
	if o.allowed && !peek {
		st.level, st.last, st.expires = level, now, now+o.reset
	}
	return o
}

// msUp converts microseconds to a Duration of whole milliseconds, rounding
// up.
func msUp(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration((us+999)/1000) * time.Millisecond
}
