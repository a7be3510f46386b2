// Package memstore is the embedded core.Store: every algorithm computed in
// process memory, with the same semantics as the Redis store, down to the
// millisecond. It needs no setup and suits a single instance, tests and
// development; instances behind a load balancer each keep their own counts,
// so share a Redis store between them instead.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"runtime"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Store keeps rate-limit state in memory. Build one with New and share it
// between limiters: each (policy name, algorithm, client key) has its own
// state. The zero value is not usable. It is safe for concurrent use, with
// no global lock: each decision is one critical section on its key's
// shard (see WithShards), which makes it atomic.
//
// The Store's clock is the wall clock read at New plus the monotonic time
// elapsed since, so stepping the wall clock (NTP, date) does not move it;
// it may drift from the wall clock by such steps and system suspends,
// while the durations in Decisions stay exact. A request dated before its
// key's latest admission is decided at that admission, so a clock
// stepping back never frees quota. Memory is bounded by WithMaxKeys; a
// janitor goroutine deletes expired state every minute. Call Close to
// stop it.
type Store struct {
	// Keys are spread over shards, each a map behind its own mutex:
	// goroutines deciding for keys on different shards never wait for
	// each other. The clock (see clock) costs half of time.Now. Requests
	// reach a shard out of time order (a goroutine reads the clock, then
	// waits for the lock behind one that read it later; app servers'
	// clocks differ), hence the rule that dates a late one at its key's
	// latest admission, which also keeps a sliding log in time order.
	// State stops mattering at a time each algorithm knows (the end of
	// the window, the moment the bucket is whole again) and decides like
	// no state from then on, before the janitor deletes it.
	shards []shard
	mask   uint64
	seed   maphash.Seed
	clock  clock
	jan    *janitor
}

// Compile-time checks.
var (
	_ core.Store = (*Store)(nil)
)

var errNoStore = errors.New("memstore: Store not built with New")

// New returns a Store with its janitor running, or an error wrapping
// core.ErrInvalidOption if an option is nil or its value is out of the
// range it documents. Call Close when done with the Store.
func New(opts ...Option) (*Store, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{
		shards: make([]shard, c.shards),
		mask:   uint64(c.shards - 1),
		seed:   maphash.MakeSeed(),
		clock:  newClock(),
		jan:    &janitor{stop: make(chan struct{}), done: make(chan struct{})},
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.max = c.maxKeys / c.shards
		if i < c.maxKeys%c.shards {
			sh.max++
		}
	}
	// The janitor holds the shards, not the Store, so a Store dropped
	// without Close can still be collected; the cleanup then stops the
	// janitor.
	go s.jan.run(s.shards, s.clock, c.interval)
	runtime.AddCleanup(s, (*janitor).halt, s.jan)
	return s, nil
}

// Take implements core.Store.Take: it decides reqs, all or nothing, at
// now, or at the Store's clock when now is zero (or at the keys' latest
// admission when that is later, see Store). It never blocks on I/O and
// ignores ctx. It returns the time it decided at, which dates a Refund of
// its admissions: now, or the Store's clock reading, to the microsecond
// and with its monotonic reading (a caller writing an absolute time such
// as X-RateLimit-Reset takes the wall time from that reading and a recent
// reading of the wall clock, as headers.Writer does); zero on an error.
//
// Input that breaks the core.Store contract (see core.Request.Validate;
// len(out) != len(reqs), no request or more than 16, a repeated Key and
// Policy.Name) returns an error wrapping core.ErrInvalidOption and records
// nothing. Requests on keys that exist already cost no allocation.
func (s *Store) Take(_ context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	// One request is one critical section on its key's shard. Several
	// lock the shards their keys hash to, each once, in ascending order,
	// so that calls never deadlock and decisions on other shards never
	// wait; every request is decided, then the steps of the admitted ones
	// undone if any was denied: each state is restored, and a state
	// created for the request is never stored. A policy with a Lockout is
	// decided with its lockout, an entry of its own beside the state, in
	// the same critical section; a policy without one pays a comparison.
	// Only cheap checks of the core.Request contract are made, enough to
	// never panic.
	if len(reqs) == 1 && len(out) == 1 {
		// One request, the common case: no array to stage it in.
		at, err := s.take(&reqs[0], reqs[0].Cost, now, &out[0])
		if err != nil {
			return time.Time{}, err
		}
		return s.timeOf(now, at), nil
	}
	at, err := s.takeAllAt(now, reqs, out, false)
	if err != nil {
		return time.Time{}, err
	}
	return s.timeOf(now, at), nil
}

// timeOf is the time a Take asked at now returns for having decided at at
// (µs): now itself, unless the key's last admission was later (see
// Store), or the reading of the Store's clock.
func (s *Store) timeOf(now time.Time, at int64) time.Time {
	if now.IsZero() {
		return s.clock.at(at)
	}
	if us := now.UnixMicro(); at != us {
		return now.Add(time.Duration(at-us) * time.Microsecond) // keeps now's monotonic reading, if any
	}
	return now
}

// take decides req, asking c units (req.Cost, or 0 for a peek, which
// writes nothing), filling the fields of *d a store decides, and returns
// the time it decided at in µs since the Unix epoch.
func (s *Store) take(req *core.Request, c int64, at time.Time, d *core.Decision) (now int64, err error) {
	p := &req.Policy
	// limits.Capacity(p.Algorithm, p.Limit, p.Burst), comparing strings only for a policy with a Burst.
	capacity := p.Limit
	if p.Burst > 0 && limits.IsBucket(p.Algorithm) {
		capacity = p.Burst
	}
	if !valid(req, capacity) {
		return 0, invalid(req)
	}
	if len(s.shards) == 0 {
		return 0, errNoStore
	}
	h := s.hash(req.Key)
	sh := &s.shards[h&s.mask]
	if at.IsZero() {
		now = s.clock.now()
	} else {
		now = at.UnixMicro()
	}
	k := kindOf(p.Algorithm)
	if p.Lockout != 0 || p.LockoutMax != 0 || p.LockoutMemory != 0 {
		if err := p.Validate(); err != nil {
			return 0, err
		}
		if p.Lockout > 0 {
			return takeLocked(sh, h, req, c, k, capacity, now, d)
		}
	}
	sh.mu.Lock()
	o, now, known := sh.take(h, req.Key, p, k, capacity, c, now)
	sh.mu.Unlock()
	if !known {
		return 0, fmt.Errorf("%w: unknown algorithm %q", core.ErrInvalidOption, string(p.Algorithm))
	}
	o.decide(d, capacity)
	return now, nil
}

// takeLocked is take for a policy with a Lockout, on shard sh, filling
// *d, and returning the time it decided at.
func takeLocked(sh *shard, h uint64, req *core.Request, c int64, k kind, capacity, now int64, d *core.Decision) (int64, error) {
	sh.mu.Lock()
	o, at, known, locked := sh.takeLocked(h, req.Key, &req.Policy, k, capacity, c, now)
	sh.mu.Unlock()
	if !known {
		return 0, fmt.Errorf("%w: unknown algorithm %q", core.ErrInvalidOption, string(req.Policy.Algorithm))
	}
	o.decide(d, capacity)
	d.LockedOut = locked
	return at, nil
}

// Reset forgets the state of key under policy, its lockout and strikes
// included, so the client's next request finds a whole quota. It never
// fails on a Store built with New.
func (s *Store) Reset(_ context.Context, key string, policy core.Policy) error {
	if len(s.shards) == 0 {
		return errNoStore
	}
	h := s.hash(key)
	sh := &s.shards[h&s.mask]
	k := kindOf(policy.Algorithm)
	sh.mu.Lock()
	if e := sh.find(h, key, policy.Name, k); e != nil {
		sh.remove(h, e)
	}
	if k != unknownKind {
		if e := sh.find(h, key, policy.Name, k|lockBit); e != nil {
			sh.remove(h, e)
		}
	}
	sh.mu.Unlock()
	return nil
}

// Len returns the number of keys (client key and policy) the Store holds,
// expired ones that the janitor has not yet deleted included. A client's
// lockout and strikes under a policy (core.Policy.Lockout) are a key of their
// own, counted here and against WithMaxKeys.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Close stops the janitor and waits for it to return. It is idempotent and
// always returns nil. The Store remains usable after Close, but expired
// state is then deleted only when its key is decided again or evicted.
func (s *Store) Close() error {
	if s.jan == nil {
		return nil
	}
	s.jan.halt()
	<-s.jan.done
	return nil
}

// sweep deletes the state expired at now, one shard at a time.
func (s *Store) sweep(now time.Time) {
	sweepShards(s.shards, now.UnixMicro(), nil)
}

// hash is the hash of a client key: its low bits choose the shard, and
// the shard's table is keyed by it, so that every policy of one client
// lives on one shard and a decision hashes nothing else.
func (s *Store) hash(key string) uint64 {
	return maphash.String(s.seed, key)
}

// valid is the part of core.Request.Validate that keeps the arithmetic
// from dividing by zero or misbehaving, in a form small enough to be
// inlined: the unsigned conversions fold each range into one comparison.
// It leaves out the string checks (the name, the algorithm: shard.take
// rejects an unknown one only when it finds no state, and there is none
// under an unknown algorithm). The core.Limiter never sends a request it
// refuses; Take calls invalid, for the error, only when it does.
func valid(req *core.Request, capacity int64) bool {
	p := &req.Policy
	return req.Key != "" &&
		uint64(p.Limit-1) < limits.MaxLimit && uint64(p.Burst) <= limits.MaxLimit &&
		uint64(p.Window-limits.MinWindow) <= uint64(limits.MaxWindow-limits.MinWindow) &&
		(p.Limit <= limits.MaxLogLimit || p.Algorithm != core.SlidingWindowLog) &&
		uint64(req.Cost-1) < uint64(capacity) &&
		(p.Burst <= p.Limit || refillsWithin(p))
}

// refillsWithin is core.Policy.Validate's bound on a bucket deeper than
// its limit: it fills from empty within 366 days, burst*w <=
// MaxWindow*limit in µs, compared in 128 bits. Beyond it, a bucket's
// lifetime overflows int64 microseconds, and its state would expire at
// once. p's limit, window and burst are in range.
func refillsWithin(p *core.Policy) bool {
	hi, lo := bits.Mul64(uint64(p.Burst), uint64(p.Window.Microseconds()))
	maxHi, maxLo := bits.Mul64(uint64(limits.MaxWindow.Microseconds()), uint64(p.Limit))
	return hi < maxHi || hi == maxHi && lo <= maxLo
}

// invalid is the error of a request that valid refuses: the one
// core.Request.Validate gives, whose rules valid restates branch-free for
// the hot path (TestValidAgreesWithValidate holds them together).
func invalid(req *core.Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	// Unreachable while valid only restates Validate's rules.
	return fmt.Errorf("%w: limit, burst or window out of range", core.ErrInvalidOption)
}
