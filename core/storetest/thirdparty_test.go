package storetest_test

// A store written outside the module, from the docs of core.Store and
// core.Algorithm alone: a mutex and a map. It proves that the store
// contract is public: what a store must check is core.Request.Validate,
// what it must do is said on core.Store, and storetest proves it.
//
// It is written as simply as the contract allows, not as the module's
// stores are. A stored state never changes: Take decides without
// writing, then stores what the admissions leave. An algorithm only says
// whether it admits a request at a given time: how long a denied request
// waits is found by asking again at later times. Both windows keep a
// count by window start, and the sliding counter weighs in whole numbers
// (math/big), not in float64 as Lua does.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/storetest"
)

func TestThirdPartyStore(t *testing.T) {
	s := newMapStore()
	storetest.Run(t, func(*testing.T) core.Store { return s })
}

func TestThirdPartyStoreConcurrent(t *testing.T) {
	storetest.RunConcurrent(t, []core.Store{newMapStore()}, 8)
}

// mapStore keeps every client's state in one map behind one mutex: each
// call is atomic because it holds the lock throughout.
type mapStore struct {
	mu    sync.Mutex
	state map[stateKey]*entry
	locks map[stateKey]*lockout
}

func newMapStore() *mapStore {
	return &mapStore{state: map[stateKey]*entry{}, locks: map[stateKey]*lockout{}}
}

// stateKey names a client's state under a policy. The algorithm is part
// of it: a policy's name with another algorithm is another state.
type stateKey struct {
	key, name string
	alg       core.Algorithm
}

func keyOf(r *core.Request) stateKey { return stateKey{r.Key, r.Policy.Name, r.Policy.Algorithm} }

// entry is one state, never changed once stored: an admission stores a
// new one. Times are microseconds since the Unix epoch.
type entry struct {
	counts        map[int64]int64 // the windows: the units admitted in each, by its start
	log           []unit          // the sliding log: admitted units, oldest first, one entry a time
	level         float64         // the buckets: the units used as of last
	last, expires int64           // the last admission; when the state stops mattering
}

type unit struct{ at, n int64 }

// lockout is a client's lockout under a policy (core.Policy.Lockout).
type lockout struct{ until, strikes, resetAt, last int64 }

// check refuses what no method takes: lengths out of [1, 16], a request
// that Validate refuses, two for one key and policy name.
func check(reqs []core.Request, decisions int) error {
	if len(reqs) < 1 || len(reqs) > 16 || decisions != len(reqs) {
		return fmt.Errorf("%w: %d requests, %d decisions", core.ErrInvalidOption, len(reqs), decisions)
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return err
		}
		for j := range i {
			if reqs[j].Key == reqs[i].Key && reqs[j].Policy.Name == reqs[i].Policy.Name {
				return fmt.Errorf("%w: two requests for %q under %q", core.ErrInvalidOption, reqs[i].Key, reqs[i].Policy.Name)
			}
		}
	}
	return nil
}

func micros(now time.Time) int64 {
	if now.IsZero() {
		now = time.Now()
	}
	return now.UnixMicro()
}

// Take decides every request, each at the later of now and its key's last
// admission; when all are admitted but not at one time, it decides them
// again at the latest, so that they are recorded at the one time it
// returns. It stores the admissions only when all are admitted; a
// denial's lockout strike is stored either way.
func (s *mapStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if err := check(reqs, len(out)); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	at := micros(now)
	vs, allowed, latest := s.decideAll(reqs, at, false)
	if allowed && latest != at {
		at = latest
		vs, allowed, _ = s.decideAll(reqs, at, false)
	}
	for i, v := range vs {
		out[i] = v.d
		if v.strike != nil {
			s.locks[keyOf(&reqs[i])] = v.strike
		}
		if allowed {
			s.state[keyOf(&reqs[i])] = v.next
		}
	}
	return time.UnixMicro(at), nil
}

// Peek decides each request at a cost of 0: a request of 1 is tested,
// nothing is stored.
func (s *mapStore) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if err := check(reqs, len(out)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vs, _, _ := s.decideAll(reqs, micros(now), true)
	for i, v := range vs {
		out[i] = v.d
	}
	return nil
}

// Refund gives back each request's cost from the admission at at, from
// what it was counted in, never what has left the window or drained.
func (s *mapStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	if err := check(reqs, len(reqs)); err != nil {
		return err
	}
	if at.IsZero() {
		return fmt.Errorf("%w: a refund needs the time of its admission", core.ErrInvalidOption)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := at.UnixMicro()
	for i := range reqs {
		k := keyOf(&reqs[i])
		if e := s.state[k]; e != nil && e.expires > now {
			s.state[k] = e.refunded(&reqs[i].Policy, reqs[i].Cost, now)
		}
	}
	return nil
}

func (s *mapStore) Reset(ctx context.Context, key string, p core.Policy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.state, stateKey{key, p.Name, p.Algorithm})
	delete(s.locks, stateKey{key, p.Name, p.Algorithm})
	return nil
}

// verdict is one request's decision, the time it was decided at, the
// state its admission leaves (nil for a peek or a denial), and the
// lockout a denial strikes.
type verdict struct {
	d      core.Decision
	at     int64
	next   *entry
	strike *lockout
}

// decideAll decides reqs at now, writing nothing, and reports whether all
// were admitted and the latest time one was decided at.
func (s *mapStore) decideAll(reqs []core.Request, now int64, peek bool) (vs []verdict, allowed bool, latest int64) {
	allowed, latest = true, now
	for i := range reqs {
		c := reqs[i].Cost
		if peek {
			c = 0
		}
		v := s.decide(&reqs[i], c, now)
		vs = append(vs, v)
		allowed = allowed && v.d.Allowed
		latest = max(latest, v.at)
	}
	return vs, allowed, latest
}

// decide decides r at now asking c units (0: a peek), its lockout first.
func (s *mapStore) decide(r *core.Request, c, now int64) verdict {
	p := &r.Policy
	strikes := int64(0)
	if p.Lockout > 0 {
		if l := s.locks[keyOf(r)]; l != nil {
			if now < l.until {
				return verdict{d: lockedOut(p, max(l.until, l.resetAt)-now, l.until-now), at: now}
			}
			if now < l.last+memory(p) {
				strikes = l.strikes
			}
		}
	}
	e := s.state[keyOf(r)]
	o, at, next := judge(e, p, c, now)
	if !o.allowed && e != nil {
		// The first whole millisecond at which it would be admitted, at the
		// latest once e is forgotten: RetryAfter, which is in milliseconds.
		// (No state admits every cost Validate lets through.)
		o.wait = 1000 * firstPass((e.expires-at+999)/1000, func(ms int64) bool {
			o, _, _ := judge(e, p, c, at+1000*ms)
			return o.allowed
		})
	}
	if p.Lockout <= 0 || o.allowed || c == 0 { // a peek strikes nothing
		return verdict{d: o.decision(p), at: at, next: next}
	}
	strikes = min(strikes+1, 64)
	length, most := p.Lockout.Microseconds(), lockoutMax(p)
	if shift := strikes - 1; shift < 62 && length <= most>>shift {
		length <<= shift
	} else {
		length = most
	}
	until := now + max(length, msUp(o.wait).Microseconds())
	resetAt := now + msUp(o.reset).Microseconds()
	return verdict{
		d:      lockedOut(p, max(until, resetAt)-now, until-now),
		at:     now,
		strike: &lockout{until: until, strikes: strikes, resetAt: resetAt, last: now},
	}
}

// lockoutMax is the longest lockout, µs; memory how long strikes last.
func lockoutMax(p *core.Policy) int64 { return max(p.LockoutMax, p.Lockout).Microseconds() }

func memory(p *core.Policy) int64 {
	if p.LockoutMemory > 0 {
		return p.LockoutMemory.Microseconds()
	}
	return min(max(24*time.Hour.Microseconds(), 2*lockoutMax(p)), 2*366*24*time.Hour.Microseconds())
}

// outcome is a decision in microseconds.
type outcome struct {
	allowed     bool
	remaining   int64
	reset, wait int64 // wait: an admission's Delay, a denial's RetryAfter
}

func (o outcome) decision(p *core.Policy) core.Decision {
	d := core.Decision{Allowed: o.allowed, Limit: capacity(p), Remaining: o.remaining, ResetAfter: msUp(o.reset)}
	if o.allowed {
		d.Delay = msUp(o.wait)
	} else {
		d.RetryAfter = msUp(o.wait)
	}
	return d
}

func lockedOut(p *core.Policy, reset, wait int64) core.Decision {
	d := outcome{reset: reset, wait: wait}.decision(p)
	d.LockedOut = true
	return d
}

func capacity(p *core.Policy) int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// msUp rounds µs up to whole milliseconds.
func msUp(us int64) time.Duration {
	if us <= 0 {
		return 0
	}
	return time.Duration((us+999)/1000) * time.Millisecond
}

// horizon bounds a bucket's reset: 2^52 µs, some 142 years.
const horizon = 1 << 52

// firstPass is the first k in [0, hi] at which passes holds, passes being
// false, then true for good (hi counts as passing).
func firstPass(hi int64, passes func(k int64) bool) int64 {
	lo := int64(0)
	for lo < hi {
		if mid := lo + (hi-lo)/2; passes(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// judge decides a request of c units (0: a peek, judged as 1) at now
// against e (nil: no state) under p, without changing e. It returns the
// outcome, its wait only an admission's; the time it decided at, now or
// the last admission when later; and, for an admission of c > 0, the
// state it leaves.
func judge(e *entry, p *core.Policy, c, now int64) (o outcome, at int64, next *entry) {
	if e == nil || e.expires <= now {
		e = &entry{}
	} else {
		now = max(now, e.last)
	}
	w, l, ask := p.Window.Microseconds(), p.Limit, max(c, 1)
	switch p.Algorithm {
	case core.FixedWindow:
		ws := now - now%w
		n := e.counts[ws]
		if o.allowed = n+ask <= l; o.allowed && c > 0 {
			n += c
			next = &entry{counts: map[int64]int64{ws: n}, last: now, expires: ws + w}
		}
		o.remaining = max(0, l-n)
		if n > 0 {
			o.reset = ws + w - now
		}
	case core.SlidingWindowLog:
		var live []unit
		n := int64(0)
		for _, u := range e.log {
			if u.at > now-w {
				live = append(live, u)
				n += u.n
			}
		}
		if o.allowed = n+ask <= l; o.allowed && c > 0 {
			if k := len(live) - 1; k >= 0 && live[k].at == now {
				live[k].n += c
			} else {
				live = append(live, unit{now, c})
			}
			n += c
			next = &entry{log: live, last: now, expires: now + w}
		}
		o.remaining = max(0, l-n)
		if len(live) > 0 {
			o.reset = live[len(live)-1].at + w - now
		}
	case core.SlidingWindowCounter:
		// The previous window weighs by the part of it still in the
		// sliding window: the sums are compared times w, in whole numbers.
		ws := now - now%w
		cur, prev := e.counts[ws], e.counts[ws-w]
		weighed := func(n int64) *big.Int { return new(big.Int).Add(mul(prev, w-(now-ws)), mul(n, w)) }
		if o.allowed = weighed(cur+ask).Cmp(mul(l, w)) <= 0; o.allowed && c > 0 {
			cur += c
			next = &entry{counts: map[int64]int64{ws: cur, ws - w: prev}, last: now, expires: ws + 2*w}
		}
		left := new(big.Int).Sub(mul(l, w), weighed(cur))
		o.remaining = max(0, left.Div(left, big.NewInt(w)).Int64())
		switch {
		case cur > 0:
			o.reset = ws + 2*w - now
		case prev > 0:
			o.reset = ws + w - now
		}
	default: // the buckets: the level drains at l per w since the last admission
		size, level := float64(capacity(p)), 0.0
		if now < min(e.expires, e.last+drainTime(e.level, l, w)) {
			level = max(0, e.level-float64(now-e.last)*float64(l)/float64(w))
		}
		if o.allowed = level+float64(ask) <= size; o.allowed {
			if p.Algorithm == core.LeakyBucket { // waits for the queue ahead
				o.wait = drainTime(level, l, w)
			}
			level += float64(c)
		}
		o.remaining = max(0, int64(math.Floor(size-level)))
		o.reset = drainTime(level, l, w)
		if o.allowed && c > 0 {
			next = &entry{level: level, last: now, expires: now + o.reset}
		}
	}
	return o, now, next
}

// mul is a*b, exact.
func mul(a, b int64) *big.Int { return new(big.Int).Mul(big.NewInt(a), big.NewInt(b)) }

// drainTime is how long level takes to drain at l per w: µs, rounded up,
// at most horizon.
func drainTime(level float64, l, w int64) int64 {
	return int64(min(math.Ceil(level*float64(w)/float64(l)), horizon))
}

// refunded is e with c units of the admission at now given back.
func (e *entry) refunded(p *core.Policy, c, now int64) *entry {
	r := *e
	w := p.Window.Microseconds()
	switch p.Algorithm {
	case core.FixedWindow, core.SlidingWindowCounter:
		ws := now - now%w
		if n, ok := e.counts[ws]; ok {
			r.counts = maps.Clone(e.counts)
			r.counts[ws] = max(0, n-c)
		}
	case core.SlidingWindowLog:
		r.log, r.last = nil, 0
		for _, u := range e.log {
			if u.at == now {
				u.n -= min(u.n, c)
			}
			if u.n > 0 {
				r.log = append(r.log, u)
				r.last = u.at
			}
		}
	default: // what drained since the admission is not given back
		drained := float64(max(0, e.last-now)) * float64(p.Limit) / float64(w)
		if give := float64(c) - drained; give > 0 {
			r.level = max(0, e.level-give)
		}
	}
	return &r
}

var _ core.Store = (*mapStore)(nil)
