package memstore

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// takeAllAt is Take of several requests (peeks when peek is set: see
// Peek), with the time it decided at in µs since the Unix epoch.
func (s *Store) takeAllAt(at time.Time, reqs []core.Request, out []core.Decision, peek bool) (int64, error) {
	n := len(reqs)
	if err := checkLen(n, len(out)); err != nil {
		return 0, err
	}
	if len(s.shards) == 0 {
		return 0, errNoStore
	}
	// The stack array of what undoing needs is a few kB at MaxLayers:
	// zeroing it would cost a single layer more than its decision.
	if n <= smallLayers {
		var ts [smallLayers]taken
		return s.takeAll(at, reqs, out, ts[:n], peek)
	}
	var ts [limits.MaxLayers]taken
	return s.takeAll(at, reqs, out, ts[:n], peek)
}

// checkLen reports bad lengths of a call's n requests and m decisions.
func checkLen(n, m int) error {
	if n != m {
		return fmt.Errorf("%w: memstore: %d requests and %d decisions", core.ErrInvalidOption, n, m)
	}
	if n < 1 || n > limits.MaxLayers {
		return fmt.Errorf("%w: memstore: %d requests, not in [1, %d]", core.ErrInvalidOption, n, limits.MaxLayers)
	}
	return nil
}

// smallLayers is how many requests Take decides with a small array.
const smallLayers = 4

// takeAll is takeAllAt on valid lengths, with ts, len(reqs) long, to work
// in.
func (s *Store) takeAll(at time.Time, reqs []core.Request, out []core.Decision, ts []taken, peek bool) (int64, error) {
	var (
		shards [limits.MaxLayers]uint32 // distinct, ascending
		m      int                      // len(shards)
	)
	for i := range reqs {
		r := &reqs[i]
		t := &ts[i]
		if err := s.stageOf(t, r); err != nil {
			return 0, fmt.Errorf("memstore: request %d: %w", i, err)
		}
		for j := range i {
			if ts[j].h == t.h && reqs[j].Key == r.Key && reqs[j].Policy.Name == r.Policy.Name {
				return 0, fmt.Errorf("%w: memstore: requests %d and %d are both for key %q under policy %q", core.ErrInvalidOption, j, i, r.Key, r.Policy.Name)
			}
		}
		ix := uint32(t.h & s.mask)
		k := m
		for k > 0 && shards[k-1] > ix {
			k--
		}
		if k == 0 || shards[k-1] != ix {
			copy(shards[k+1:m+1], shards[k:m])
			shards[k] = ix
			m++
		}
	}
	for _, ix := range shards[:m] {
		s.shards[ix].mu.Lock()
	}
	// The clock is read under the locks, so that no request decided
	// since its reading has recorded a later admission on these keys.
	var now int64
	if at.IsZero() {
		now = s.clock.now()
	} else {
		now = at.UnixMicro()
	}
	allowed := !peek
	if peek {
		// Read under every shard's lock: one snapshot, nothing written.
		for i := range reqs {
			t, r := &ts[i], &reqs[i]
			sh := &s.shards[t.h&s.mask]
			if t.lockout {
				t.o, _, _, t.locked = sh.takeLocked(t.h, r.Key, &r.Policy, t.k, t.capacity, 0, now)
			} else {
				t.o, _, _ = sh.take(t.h, r.Key, &r.Policy, t.k, t.capacity, 0, now)
			}
		}
	} else {
		now, allowed = s.stageAll(reqs, ts, now)
	}
	for i := range reqs {
		t := &ts[i]
		switch {
		case peek || !t.o.allowed || t.e == nil:
		case allowed && t.created:
			sh := &s.shards[t.h&s.mask]
			t.e.setKey(reqs[i].Key)
			t.e.name = sh.intern(reqs[i].Policy.Name)
			sh.insert(t.h, t.e, now)
		case !allowed && !t.created:
			t.undo()
		}
	}
	for i := m - 1; i >= 0; i-- {
		s.shards[shards[i]].mu.Unlock()
	}

	for i := range reqs {
		t := &ts[i]
		d := &out[i]
		*d = core.Decision{}
		t.o.decide(d, t.capacity)
		d.LockedOut = t.locked
	}
	return now, nil
}

// stageAll stages every request of reqs at now (see stage), and returns
// the one time every admission is recorded at, and whether all were
// allowed. A key whose last admission is later than now decides its
// request at that admission (see step): when every request is allowed,
// but not all at one time, every step is undone and every request decided
// again at the latest of their times, at which every key's last admission
// is past. So the time Take returns is the one where every layer
// recorded its units, which dates their give-backs. The caller holds the
// requests' shards' locks.
func (s *Store) stageAll(reqs []core.Request, ts []taken, now int64) (int64, bool) {
	allowed, latest := s.stageAt(reqs, ts, now)
	if !allowed || latest == now {
		return now, allowed
	}
	for i := range ts {
		if t := &ts[i]; t.e != nil && !t.created {
			t.undo()
		}
	}
	allowed, _ = s.stageAt(reqs, ts, latest)
	return latest, allowed
}

// stageAt stages every request of reqs at now, and reports whether all
// were allowed, and the latest time one was decided at.
func (s *Store) stageAt(reqs []core.Request, ts []taken, now int64) (allowed bool, latest int64) {
	allowed, latest = true, now
	for i := range reqs {
		t := &ts[i]
		s.shards[t.h&s.mask].stage(t, &reqs[i], now)
		allowed = allowed && t.o.allowed
		latest = max(latest, t.at)
	}
	return allowed, latest
}

// taken is one request of a Take of several: what it was decided by, and how to
// undo its step.
type taken struct {
	h        uint64
	capacity int64
	at       int64 // the time the request was decided at (µs)
	k        kind
	lockout  bool // the policy has a Lockout
	locked   bool // the outcome is the lockout's
	o        outcome
	// e is the state the request stepped, nil when it stepped none; created
	// says e is new, not in the shard's table.
	e       *entry
	created bool
	// fresh says e had expired, and was cleared for the request.
	fresh bool
	// saved is e's state before the step, and mark its log's.
	saved state
	mark  logMark
}

// logMark is what undoing a sliding log's add needs: its entries and head
// before it, and the value of its newest entry, which the add may have
// grown.
type logMark struct {
	entries []logEntry
	head    int
	newest  logEntry
}

// stageOf checks r as Take does and fills in t what deciding it needs, or
// returns the error Take would.
func (s *Store) stageOf(t *taken, r *core.Request) error {
	p := &r.Policy
	capacity := p.Limit
	if p.Burst > 0 && limits.IsBucket(p.Algorithm) {
		capacity = p.Burst
	}
	if !valid(r, capacity) {
		return invalid(r)
	}
	k := kindOf(p.Algorithm)
	if k == unknownKind {
		return fmt.Errorf("%w: unknown algorithm %q", core.ErrInvalidOption, string(p.Algorithm))
	}
	*t = taken{h: s.hash(r.Key), capacity: capacity, k: k}
	if p.Lockout != 0 || p.LockoutMax != 0 || p.LockoutMemory != 0 {
		if err := p.Validate(); err != nil {
			return err
		}
		t.lockout = p.Lockout > 0
	}
	return nil
}

// stage decides r at now into t, as Take would, but keeps what undoing it
// needs, and leaves a state it creates out of the table: takeAll inserts it
// once every request is admitted. A denial is final: its lockout strike is
// recorded at once. The caller holds sh.mu.
func (sh *shard) stage(t *taken, r *core.Request, now int64) {
	p := &r.Policy
	t.at, t.e, t.created, t.locked = now, nil, false, false
	if t.lockout {
		if lock := sh.find(t.h, r.Key, p.Name, t.k|lockBit); lock != nil && now < lock.st.win {
			// Locked out: takeLocked denies without deciding.
			t.o, _, _, t.locked = sh.takeLocked(t.h, r.Key, p, t.k, t.capacity, r.Cost, now)
			return
		}
	}
	if e := sh.find(t.h, r.Key, p.Name, t.k); e != nil {
		st := &e.st
		t.e, t.saved = e, *st
		t.fresh = st.expires <= now
		if !t.fresh {
			t.at = max(now, st.last) // as step decides
		}
		if t.fresh {
			// Expired state decides like none at all.
			st.clear()
			st.capacity = float32(t.capacity)
		} else if lg := st.log; lg != nil {
			// Forget what the step would forget (which a denial forgets
			// too), so that the step only adds, and its add can be undone.
			lg.forget(max(now, st.last) - p.Window.Microseconds())
			t.mark = logMark{entries: lg.entries, head: lg.head}
			if len(lg.entries) > 0 {
				t.mark.newest = lg.entries[len(lg.entries)-1]
			}
		}
		t.o = step(st, t.fresh, p, r.Cost, now)
	} else {
		t.e = &entry{st: state{kind: t.k, capacity: float32(t.capacity)}}
		t.created, t.fresh = true, true
		t.o = step(&t.e.st, true, p, r.Cost, now)
	}
	if t.lockout && !t.o.allowed {
		// The step changed nothing: takeLocked decides again, alike,
		// and records the strike.
		t.e = nil
		t.o, _, _, t.locked = sh.takeLocked(t.h, r.Key, p, t.k, t.capacity, r.Cost, now)
	}
}

// undo restores the state t's admitted step changed, which is in the
// table. The caller holds its shard's lock.
func (t *taken) undo() {
	st := &t.e.st
	if t.fresh {
		// It had expired: it decides like none again. (Its log's array
		// was reused by the step.)
		capacity := t.saved.capacity
		st.clear()
		st.capacity = capacity
		return
	}
	*st = t.saved
	if lg := st.log; lg != nil {
		lg.entries, lg.head = t.mark.entries, t.mark.head
		if k := len(lg.entries); k > 0 {
			lg.entries[k-1] = t.mark.newest
		}
	}
}
