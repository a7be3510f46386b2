package memstore

import (
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// This file keeps the lockouts of core.Policy.Lockout. A client's lockout under a
// policy is an entry of its own, beside the algorithm's, in the same chain
// (same client key, same hash), under the same name, of the algorithm's
// kind with lockBit set, so that a decision finds both on one shard under
// one lock. It reuses the fields of state:
//
//	win      the end of the lockout (µs); not locked from then on
//	cur      the strikes
//	prev     when the algorithm's quota is whole again, as of the offence (µs)
//	last     the time of the last offence (µs)
//	expires  the later of the lockout's end and last + the strikes' memory
//
// The arithmetic is that of core/redisstore/lockout.lua, operation for
// operation: the algorithm's durations enter it rounded up to whole
// milliseconds, as the Redis script receives them from the algorithm's.

// lockBit marks the kind of a lockout entry.
const lockBit kind = 0x80

// lockParams are a policy's Lockout in microseconds.
type lockParams struct {
	duration, max, memory int64
}

// lockParamsOf returns p's lockout in microseconds. p.Lockout is above 0.
func lockParamsOf(p *core.Policy) lockParams {
	return lockParams{p.Lockout.Microseconds(), limits.LockoutCap(p.Lockout, p.LockoutMax).Microseconds(),
		limits.LockoutMemory(p.Lockout, p.LockoutMax, p.LockoutMemory).Microseconds()}
}

// length is the lockout the strike-th offence starts (strike >= 1), µs:
// duration doubled strike-1 times, capped at max.
func (lp lockParams) length(strike int64) int64 {
	if shift := strike - 1; shift < 62 && lp.duration <= lp.max>>shift {
		return lp.duration << shift
	}
	return lp.max
}

// takeLocked is take for a policy with a Lockout: it denies a locked-out
// client without deciding, and locks out a client the algorithm denies.
// It reports whether the outcome is a lockout's, and false for known when
// p's algorithm is unknown; at is the time an admission was decided and
// recorded at (see shard.take). The caller holds sh.mu.
func (sh *shard) takeLocked(h uint64, key string, p *core.Policy, k kind, capacity, cost, now int64) (o outcome, at int64, known, locked bool) {
	lp := lockParamsOf(p)
	lock := sh.find(h, key, p.Name, k|lockBit)
	var strikes int64
	if lock != nil {
		st := &lock.st
		if now < st.win {
			return outcome{remaining: 0, reset: max(st.win, st.prev) - now, wait: st.win - now}, now, true, true
		}
		if now < st.last+lp.memory {
			strikes = st.cur
		}
	}
	o, at, known = sh.take(h, key, p, k, capacity, cost, now)
	if !known || o.allowed || cost == 0 { // a peek strikes nothing
		return o, at, known, false
	}
	strikes = min(strikes+1, limits.MaxStrikes)
	until := now + max(lp.length(strikes), msUp(o.wait).Microseconds())
	resetAt := now + msUp(o.reset).Microseconds()
	if lock == nil {
		lock = &entry{st: state{kind: k | lockBit, capacity: float32(capacity)}}
		lock.setKey(key)
		lock.name = sh.intern(p.Name)
		sh.insert(h, lock, now)
	}
	st := &lock.st
	st.win, st.cur, st.prev, st.last = until, strikes, resetAt, now
	st.expires = max(until, now+lp.memory)
	return outcome{remaining: 0, reset: max(until, resetAt) - now, wait: until - now}, now, true, true
}

// lockWorth is the worth of a lockout entry at now (see state.worth): a
// lockout in force holds back the whole quota; strikes alone, half.
func (st *state) lockWorth(now int64) float64 {
	if now < st.win {
		return 1
	}
	return 0.5
}
