package storetest_test

// A store written outside the module, from the docs of core.Store and
// core.Algorithm alone: a mutex and a map. It proves that the store
// contract is public: what a store must check is core.Request.Validate,
// what it must do is said on core.Store, and storetest proves it.

import (
	"context"
	"fmt"
	"math"
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

// entry is one state; each algorithm uses its fields. Times are
// microseconds since the Unix epoch.
type entry struct {
	win, cur, prev int64     // windows: the window's start, its count, the previous one's
	level          float64   // the buckets: the units used, as of last
	log            []logUnit // the sliding log: admitted units, oldest first
	last, expires  int64     // the last admission; when the state stops mattering
}

type logUnit struct{ at, n int64 }

// clone copies b (nil for none), its log too.
func (b *entry) clone() *entry {
	if b == nil {
		return nil
	}
	c := *b
	c.log = append([]logUnit(nil), b.log...)
	return &c
}

// lockout is a client's lockout under a policy (core.Policy.Lockout).
type lockout struct {
	until, strikes, resetAt, last, expires int64
}

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

func keyOf(r *core.Request) stateKey { return stateKey{r.Key, r.Policy.Name, r.Policy.Algorithm} }

// Take decides every request, each at the later of now and its key's last
// admission; when all are admitted but not at one time, it decides them
// again at the latest, so that they are recorded at the one time it
// returns. When one is denied, it restores the states it stepped (a
// denial's lockout strike stays).
func (s *mapStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if err := check(reqs, len(out)); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	saved := map[stateKey]*entry{}
	for i := range reqs {
		saved[keyOf(&reqs[i])] = s.state[keyOf(&reqs[i])].clone()
	}
	restore := func() {
		for k, b := range saved {
			if delete(s.state, k); b != nil {
				s.state[k] = b.clone()
			}
		}
	}
	at := micros(now)
	allowed, latest := s.takeAll(reqs, out, at)
	if allowed && latest != at {
		restore()
		allowed, _ = s.takeAll(reqs, out, latest)
		at = latest
	}
	if !allowed {
		restore()
	}
	return time.UnixMicro(at), nil
}

// takeAll decides reqs at now, and reports whether all were allowed and
// the latest time one was decided at.
func (s *mapStore) takeAll(reqs []core.Request, out []core.Decision, now int64) (allowed bool, latest int64) {
	allowed, latest = true, now
	for i := range reqs {
		var at int64
		out[i], at = s.decide(&reqs[i], reqs[i].Cost, now)
		allowed = allowed && out[i].Allowed
		latest = max(latest, at)
	}
	return allowed, latest
}

// Peek decides each request at a cost of 0: a request of 1 is tested,
// nothing is written.
func (s *mapStore) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if err := check(reqs, len(out)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range reqs {
		out[i], _ = s.decide(&reqs[i], 0, micros(now))
	}
	return nil
}

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
		if b := s.state[keyOf(&reqs[i])]; b != nil && b.expires > now {
			b.refund(&reqs[i].Policy, reqs[i].Cost, now)
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

// decide decides r at now asking c units (0: a peek), its lockout first,
// and returns the time it decided at.
func (s *mapStore) decide(r *core.Request, c, now int64) (core.Decision, int64) {
	p := &r.Policy
	if p.Lockout <= 0 {
		o, at := s.step(r, c, now)
		return o.decision(p), at
	}
	lk := keyOf(r)
	l := s.locks[lk]
	strikes := int64(0)
	if l != nil {
		if now < l.until {
			return outcome{reset: max(l.until, l.resetAt) - now, wait: l.until - now, lockedOut: true}.decision(p), now
		}
		if now < l.last+memory(p) {
			strikes = l.strikes
		}
	}
	o, at := s.step(r, c, now)
	if o.allowed || c == 0 { // a peek strikes nothing
		return o.decision(p), at
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
	s.locks[lk] = &lockout{until: until, strikes: strikes, resetAt: resetAt, last: now, expires: max(until, now+memory(p))}
	return outcome{reset: max(until, resetAt) - now, wait: until - now, lockedOut: true}.decision(p), now
}

// lockoutMax is the longest lockout, µs; memory how long strikes last.
func lockoutMax(p *core.Policy) int64 { return max(p.LockoutMax, p.Lockout).Microseconds() }

func memory(p *core.Policy) int64 {
	if p.LockoutMemory > 0 {
		return p.LockoutMemory.Microseconds()
	}
	return min(max(24*time.Hour.Microseconds(), 2*lockoutMax(p)), 2*366*24*time.Hour.Microseconds())
}

// step decides r at now by its algorithm, writing the state only for an
// admission of c > 0, and returns the time it decided at: now, or the
// key's last admission when that is later.
func (s *mapStore) step(r *core.Request, c, now int64) (outcome, int64) {
	p := &r.Policy
	k := keyOf(r)
	b := s.state[k]
	fresh := b == nil || b.expires <= now
	if fresh {
		b = &entry{}
	} else {
		now = max(now, b.last)
	}
	w, l := p.Window.Microseconds(), p.Limit
	var o outcome
	switch p.Algorithm {
	case core.FixedWindow:
		o = b.fixedWindow(fresh, l, w, c, now)
	case core.SlidingWindowLog:
		o = b.slidingLog(fresh, l, w, c, now)
	case core.SlidingWindowCounter:
		o = b.slidingCounter(fresh, l, w, c, now)
	default:
		o = b.bucket(fresh, p, c, now)
	}
	if o.allowed && c > 0 {
		s.state[k] = b
	}
	return o, now
}

// outcome is a decision in microseconds.
type outcome struct {
	allowed     bool
	remaining   int64
	reset, wait int64 // wait: an admission's Delay, a denial's RetryAfter
	lockedOut   bool
}

func (o outcome) decision(p *core.Policy) core.Decision {
	d := core.Decision{Allowed: o.allowed, Limit: capacity(p), Remaining: o.remaining, ResetAfter: msUp(o.reset), LockedOut: o.lockedOut}
	if o.allowed {
		d.Delay = msUp(o.wait)
	} else {
		d.RetryAfter = msUp(o.wait)
	}
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

func (b *entry) fixedWindow(fresh bool, l, w, c, now int64) outcome {
	ws := now - now%w
	n := int64(0)
	if !fresh && b.win == ws {
		n = b.cur
	}
	o := outcome{}
	if n+max(c, 1) <= l {
		o.allowed = true
		if c > 0 {
			n += c
			b.win, b.cur, b.last, b.expires = ws, n, now, ws+w
		}
	} else {
		o.wait = ws + w - now
	}
	o.remaining = max(0, l-n)
	if n > 0 {
		o.reset = ws + w - now
	}
	return o
}

func (b *entry) slidingLog(fresh bool, l, w, c, now int64) outcome {
	var live []logUnit
	n := int64(0)
	if !fresh {
		for _, u := range b.log {
			if u.at > now-w {
				live = append(live, u)
				n += u.n
			}
		}
	}
	o := outcome{allowed: n+max(c, 1) <= l}
	if o.allowed && c > 0 {
		if k := len(live); k > 0 && live[k-1].at == now {
			live[k-1].n += c
		} else {
			live = append(live, logUnit{now, c})
		}
		n += c
		b.log, b.last, b.expires = live, now, now+w
	} else if !o.allowed {
		// The (n+c-l)-th oldest unit must leave the window first.
		need := n + max(c, 1) - l
		for _, u := range live {
			if need -= u.n; need <= 0 {
				o.wait = u.at + w - now
				break
			}
		}
	}
	o.remaining = max(0, l-n)
	if len(live) > 0 {
		o.reset = live[len(live)-1].at + w - now
	}
	return o
}

func (b *entry) slidingCounter(fresh bool, l, w, c, now int64) outcome {
	ws := now - now%w
	var cur, prev int64
	switch {
	case fresh:
	case b.win == ws:
		cur, prev = b.cur, b.prev
	case b.win == ws-w:
		prev = b.cur
	}
	ask := max(c, 1)
	o := outcome{}
	if fits(weigh(prev, w, now-ws), cur, ask, l) {
		o.allowed = true
		if c > 0 {
			cur += c
			b.win, b.cur, b.prev, b.last, b.expires = ws, cur, prev, now, ws+2*w
		}
	} else if cur+ask <= l {
		// The previous window's weight blocks until it has decayed enough.
		o.wait = firstPass(now-ws, w, func(el int64) bool { return fits(weigh(prev, w, el), cur, ask, l) }) + ws - now
	} else {
		// This window's count blocks: wait into the next window.
		o.wait = firstPass(0, w, func(el int64) bool { return fits(weigh(cur, w, el), 0, ask, l) }) + ws + w - now
	}
	o.remaining = max(0, int64(math.Floor(float64(l)-float64(weigh(prev, w, now-ws)+float64(cur)))))
	switch {
	case cur > 0:
		o.reset = ws + 2*w - now
	case prev > 0:
		o.reset = ws + w - now
	}
	return o
}

// weigh is the previous window's count by the part of it still in the
// sliding window, el µs into the current one.
func weigh(prev, w, el int64) float64 {
	if el == 0 {
		return float64(prev)
	}
	return float64(float64(prev) * float64(w-el) / float64(w))
}

func fits(p float64, cur, c, l int64) bool {
	return float64(p+float64(cur))+float64(c) <= float64(l)
}

// bucket is both buckets: the level is the units used, drained at Limit
// per Window since the last admission; the leaky bucket's admission waits
// for the queue ahead of it.
func (b *entry) bucket(fresh bool, p *core.Policy, c, now int64) outcome {
	w, l, size := p.Window.Microseconds(), p.Limit, capacity(p)
	levelAt := func(el int64) float64 { return max(0, b.level-float64(float64(el)*float64(l)/float64(w))) }
	expires := b.expires
	level := 0.0
	if !fresh {
		expires = min(expires, b.last+int64(math.Ceil(b.level*float64(w)/float64(l))))
		if now >= expires {
			fresh = true
		} else {
			level = levelAt(now - b.last)
		}
	}
	ask := max(c, 1)
	o := outcome{}
	if float64(level+float64(ask)) <= float64(size) {
		o.allowed = true
		if p.Algorithm == core.LeakyBucket {
			o.wait = int64(math.Ceil(level * float64(w) / float64(l)))
		}
		if c > 0 {
			level += float64(c)
		}
	} else {
		el := now - b.last
		o.wait = firstPass(0, min(expires-now, 1<<52), func(k int64) bool { return float64(levelAt(el+k)+float64(ask)) <= float64(size) })
	}
	o.remaining = max(0, int64(math.Floor(float64(size)-level)))
	o.reset = min(int64(math.Ceil(level*float64(w)/float64(l))), 1<<52)
	if o.allowed && c > 0 {
		b.level, b.last, b.expires = level, now, now+o.reset
	}
	return o
}

// firstPass is the first k in [lo, hi] at which passes holds (false, then
// true for good; hi counts as passing), so that RetryAfter is exact.
func firstPass(lo, hi int64, passes func(k int64) bool) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if passes(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// refund gives back c units of the admission at now, from what it was
// counted in, never what has left the window or drained.
func (b *entry) refund(p *core.Policy, c, now int64) {
	w := p.Window.Microseconds()
	switch p.Algorithm {
	case core.FixedWindow:
		if b.win == now-now%w {
			b.cur = max(0, b.cur-c)
		}
	case core.SlidingWindowCounter:
		switch ws := now - now%w; b.win {
		case ws:
			b.cur = max(0, b.cur-c)
		case ws + w:
			b.prev = max(0, b.prev-c)
		}
	case core.SlidingWindowLog:
		for i := range b.log {
			if b.log[i].at == now {
				b.log[i].n = max(0, b.log[i].n-c)
			}
		}
		kept := b.log[:0]
		for _, u := range b.log {
			if u.n > 0 {
				kept = append(kept, u)
			}
		}
		b.log, b.last = kept, 0
		if len(kept) > 0 {
			b.last = kept[len(kept)-1].at
		}
	default:
		drained := float64(float64(max(0, b.last-now)) * float64(p.Limit) / float64(w))
		if give := min(float64(c), max(0, float64(c)-drained)); give > 0 {
			b.level = max(0, b.level-give)
		}
	}
}

var _ core.Store = (*mapStore)(nil)
