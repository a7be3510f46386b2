package reputation

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/apigate/ratelimit/access"
)

// Bans returns the bans t makes, to enforce as a deny list; nil in shadow
// mode, which bans no one.
func (t *Tracker) Bans() access.Matcher {
	if t.shadow {
		return nil
	}
	return t.match
}

// eitherBans matches the bans of Config.Bans, and those this server holds
// because writing them there failed (Tracker.fallback).
type eitherBans struct {
	shared   access.Matcher
	fallback *access.Bans
}

func (b eitherBans) Match(addr netip.Addr, key string, now time.Time) (access.Entry, bool) {
	if e, ok := b.shared.Match(addr, key, now); ok {
		return e, true
	}
	return b.fallback.Match(addr, key, now)
}

// localBans is an access.Bans as a Banner: the bans of one process.
type localBans struct{ *access.Bans }

func (b localBans) Ban(_ context.Context, e access.Entry, d time.Duration) (access.Entry, error) {
	return b.Bans.Ban(e, d)
}

// banTimeout bounds a ban's write (over a client that honours context
// deadlines: go-redis's ContextTimeoutEnabled), and banPause is how long,
// after one failed, bans are held on this server without trying the
// shared ones: a frozen Redis costs one request banTimeout, not each.
const (
	banTimeout = time.Second
	banPause   = time.Second
)

// errBansPaused is why a ban is held on this server only while the
// shared bans are paused after a failure.
var errBansPaused = errors.New("reputation: shared bans paused after a failure")

// bannedNow reports whether key is banned now.
func (t *Tracker) bannedNow(key string) bool {
	_, ok := t.match.Match(netip.Addr{}, key, time.Now())
	return ok
}

// ban bans key, which entered band, for the length its offences earn,
// and reports whether it did (not in shadow mode).
func (t *Tracker) ban(ctx context.Context, key string, bi int) bool {
	band := t.bands[bi].Name
	now := t.now()
	offences := t.offences.Get(key, now)
	d := t.banFor
	for i := 0.0; i+0.5 < offences && d < t.banMax; i++ { // doubled for each offence remembered, rounded
		d *= 2
	}
	d = min(d, t.banMax)
	d = time.Duration(float64(d) * (0.9 + 0.2*rand.Float64())) // ±10%: banned clients do not return at one instant
	if t.shadow {
		t.banned[bi].Add(1) // Stats counts what shadow mode would have banned
		t.log.Info("reputation: would ban (shadow mode)", "key", key, "band", band, "for", d)
		return false
	}
	if _, err := t.offences.Add(ctx, key, 1, now); err != nil {
		t.log.Warn("reputation: remembering an offence failed", "key", key, "error", err)
	}
	e := access.Entry{Key: key, Reason: "reputation: " + band}
	var err error
	if t.fallback == nil || time.Now().UnixNano() >= t.bansPaused.Load() {
		ctx, cancel := context.WithTimeout(ctx, banTimeout)
		_, err = t.bans.Ban(ctx, e, d)
		cancel()
		if err != nil && t.fallback != nil {
			t.bansPaused.Store(time.Now().Add(banPause).UnixNano())
		}
	} else {
		err = errBansPaused
	}
	if err != nil {
		if t.fallback == nil {
			t.log.Warn("reputation: banning failed", "key", key, "band", band, "error", err)
			return false
		}
		if _, ferr := t.fallback.Ban(e, d); ferr != nil {
			t.log.Warn("reputation: banning failed", "key", key, "band", band, "error", errors.Join(err, ferr))
			return false
		}
		t.log.Warn("reputation: banned on this server only: the shared bans failed", "key", key, "band", band, "for", d, "error", err)
	}
	t.banned[bi].Add(1)
	t.log.Info("reputation: banned", "key", key, "band", band, "for", d)
	return true
}
