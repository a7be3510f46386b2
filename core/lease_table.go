package core

import (
	"strings"
)

// get returns the lease of r's key, made if need be, or nil when the
// table is full or the lease was taken under another policy (a
// PolicySource changed it): the store decides.
func (t *leaseTable) get(l *Limiter, r *Request, now int64) *lease {
	if x, ok := t.m.Load(r.Key); ok {
		le := x.(*lease)
		if samePolicy(&le.policy, &r.Policy) {
			return le
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if x, ok := t.m.Load(r.Key); ok {
		old := x.(*lease)
		if samePolicy(&old.policy, &r.Policy) {
			return old
		}
		t.m.Delete(r.Key)
		t.n.Add(-1)
		l.drop(old)
	}
	if t.n.Load() >= maxLeasedKeys && (now-t.swept < t.life || !t.sweep(l, now)) {
		return nil // full: swept at most once a lifetime, so that a flood of new keys costs no sweep each
	}
	le := &lease{key: strings.Clone(r.Key), policy: r.Policy, life: t.life, since: now, fleet: r.Policy.capacity()}
	t.m.Store(le.key, le)
	t.n.Add(1)
	return le
}

// sweep removes the leases that have decided nothing for two lifetimes,
// giving back what they hold, and reports whether it removed any.
func (t *leaseTable) sweep(l *Limiter, now int64) bool {
	t.swept = now
	removed := false
	t.m.Range(func(k, x any) bool {
		le := x.(*lease)
		le.mu.Lock()
		idle := !le.renewing && now-le.used > 2*t.life
		le.mu.Unlock()
		if idle {
			t.m.Delete(k)
			t.n.Add(-1)
			l.drop(le)
			removed = true
		}
		return true
	})
	return removed
}

// forget removes key's lease, if any, its grants forgotten (the store
// forgot them: Limiter.Reset).
func (t *leaseTable) forget(key string) {
	t.mu.Lock()
	if _, ok := t.m.LoadAndDelete(key); ok {
		t.n.Add(-1)
	}
	t.mu.Unlock()
}

// undry lets the lease of key, if any, ask the store again at once: units
// came back to it (Limiter.Refund).
func (t *leaseTable) undry(key string) {
	if x, ok := t.m.Load(key); ok {
		le := x.(*lease)
		le.mu.Lock()
		le.dry = 0
		le.mu.Unlock()
	}
}
