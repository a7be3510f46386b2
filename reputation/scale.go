package reputation

import (
	"context"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// maxSuspects bounds the snapshot of the clients in a band that scales:
// past it, a client newly in such a band is not scaled until a prune
// makes room (it is still banned at a band that bans). Each client that
// enters copies it once, so a flood of distinct suspects costs at most
// maxSuspects copies of at most maxSuspects entries, then a prune per
// pruneEvery.
const maxSuspects = 4096

// pruneEvery is how often a full snapshot of suspects may be pruned.
const pruneEvery = time.Second

// Adjust scales p's Limit (and Burst) by the band of key's score (see
// Band.Scale), never into an invalid policy or a looser one: it is
// the core.PolicySource httplimit.WithReputation gives the Limiter. It
// reads the score this server holds: no I/O, no allocation. A client in
// no band that scales, nearly every one, costs it one atomic load and
// one map lookup, and gets p as it is.
func (t *Tracker) Adjust(_ context.Context, key string, p core.Policy) (core.Policy, error) {
	if t.shadow || !t.scales {
		return p, nil
	}
	m := t.suspects.Load()
	if m == nil {
		return p, nil // no client above a band that scales
	}
	if _, ok := (*m)[key]; !ok {
		return p, nil // not this one
	}
	i := t.band(t.scores.Get(key, t.now()))
	if i < 0 {
		return p, nil
	}
	if s := t.bands[i].Scale; s > 0 && s < 1 {
		// The one derivation of a scaled policy (as the overrides' and the
		// load signal's): rounded down, and what the scaled rate cannot
		// keep (a burst it takes longer than 366 days to refill) clamped
		// down, so that the band's policy is valid and no looser than the
		// scale asks, never one the Limiter would decide by its fail mode.
		p.Limit, p.Burst = limits.Derive(p.Algorithm, p.Limit, p.Window, p.Burst, s)
	}
	return p, nil
}

// suspect adds key, whose score is above scaleFrom, to the snapshot of
// suspects, unless it is in it already, or the snapshot is full and
// cannot be pruned yet (see maxSuspects).
func (t *Tracker) suspect(key string, now time.Time) {
	if m := t.suspects.Load(); m != nil {
		if _, ok := (*m)[key]; ok {
			return // the common case: no lock, no copy
		}
	}
	t.suspectsMu.Lock()
	defer t.suspectsMu.Unlock()
	old := t.suspects.Load()
	if old == nil {
		t.suspects.Store(&map[string]struct{}{key: {}})
		return
	}
	if _, ok := (*old)[key]; ok {
		return
	}
	prune := len(*old) >= maxSuspects && now.Sub(t.pruned) >= pruneEvery
	if len(*old) >= maxSuspects && !prune {
		return
	}
	m := make(map[string]struct{}, len(*old)+1)
	for k := range *old {
		if !prune || t.scores.Get(k, now) > t.scaleFrom {
			m[k] = struct{}{}
		}
	}
	if prune {
		t.pruned = now
	}
	if len(m) < maxSuspects {
		m[key] = struct{}{}
	}
	t.suspects.Store(&m)
}
