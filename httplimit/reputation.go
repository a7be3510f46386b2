package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// WithReputation scores the flow's clients with t and enforces what t
// decides (see package reputation). t hears every request a limit denies
// or a lockout refuses, every deny-listed one, and, through Serve, every
// 401 and 403 answer and every 404. t's bans are a deny list of the flow,
// answered 403 with Retry-After; a band that scales limits scales every
// layer keyed like a client t scored, as a core.PolicySource after those
// of WithCore. What the flow sees counts against the client's address
// (WithClientIP), whatever t's Config.Key, so that a request claiming
// another client's identity cannot earn it a ban; Config.Key is whom
// reputation.Penalize counts against. A request is refused when its
// address or that key is banned. A nil t is invalid. docs/reputation.md
// is the guide.
func WithReputation(t *reputation.Tracker) Option {
	return func(c *config) error {
		if t == nil {
			return invalid("WithReputation", "nil Tracker")
		}
		c.rep = t
		return nil
	}
}

// reputationMark starts the Reason of the bans a Tracker writes.
const reputationMark = "reputation: "

// repAddr is the key the flow's signals about r count toward: its
// client address's; "" when it has none.
func (f *Flow) repAddr(r keyfuncs.Request) string {
	key, err := f.clientIP.Key(r)
	if err != nil {
		return ""
	}
	return key
}

// repOwnKey is the key of r under the Tracker's own Config.Key, which
// reputation.Penalize counts toward; "" when the Tracker has none, or it
// finds none for r.
func (f *Flow) repOwnKey(r keyfuncs.Request) string {
	if f.repOwn == nil {
		return ""
	}
	key, err := f.repOwn(r)
	if err != nil {
		return ""
	}
	return key
}

// repSignal scores signal s of r's client, against its address (st's,
// when the flow had it).
func (f *Flow) repSignal(st *state, r keyfuncs.Request, s reputation.Signal) {
	key := st.repKey
	if key == "" {
		key = f.repAddr(r)
	}
	if key != "" {
		f.rep.Record(context.WithoutCancel(r.Context()), key, s)
	}
}

// repResponse scores what the response of r's client, of status, says,
// against key, its address's; ctx is the context its handler ran under,
// which reputation.MarkUnrouted may have marked.
func (f *Flow) repResponse(ctx context.Context, r keyfuncs.Request, key string, status int) {
	var s reputation.Signal
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		s = reputation.Refused
	case status == http.StatusNotFound && r.Unrouted():
		s = reputation.Unrouted // no route serves the path: a scanner's
	case status == http.StatusNotFound:
		s = reputation.NotFound
	default:
		return
	}
	f.rep.Record(context.WithoutCancel(ctx), key, s)
}

// repBan reports whether e, a deny list's entry, is a ban a Tracker
// wrote, and the time left on it.
func repBan(e error) (bool, time.Duration) {
	var le access.Entry
	if !errors.As(e, &le) || !strings.HasPrefix(le.Reason, reputationMark) {
		return false, 0
	}
	return true, time.Until(le.Expires)
}

// withReputation completes New for WithReputation's Tracker: its bans
// are matched by its key (repBanned), and it scales limits as the last
// PolicySource.
func withReputation(c *config) {
	if c.rep == nil {
		return
	}
	c.repBans = c.rep.Bans() // none in shadow mode
	cfg := c.rep.Config()
	if !cfg.Shadow && slices.ContainsFunc(cfg.Bands, func(b reputation.Band) bool { return b.Scale > 0 && b.Scale < 1 }) {
		c.core = append(c.core, core.WithPolicySource(c.rep)) // a band scales limits
	}
}

// repBanned answers r, whose address's key is addr and whose first
// layer's key is key, when the reputation has banned addr, or r's key
// under the Tracker's own Config.Key: 403 with Retry-After, as a deny
// list's refusal (the allow lists, checked before, win). It reports
// whether it did, and keeps addr in st for the signals. The bans are the
// Tracker's own, by key: no address to parse, one atomic load and one
// lookup (two with a Config.Key).
func (f *Flow) repBanned(st *state, r keyfuncs.Request, w Response, key, addr string) bool {
	st.repKey = addr
	now := time.Now()
	e, ok := f.repBans.Match(netip.Addr{}, addr, now)
	if addr == "" {
		ok = false
	}
	if !ok && f.repOwn != nil {
		if own := f.repOwnKey(r); own != "" {
			e, ok = f.repBans.Match(netip.Addr{}, own, now)
		}
	}
	if !ok {
		return false
	}
	f.report(key, denyListed)
	f.forbid(st, r, w, e)
	return true
}

// repOwn returns t's own Config.Key, or nil (and for a nil t).
func repOwn(t *reputation.Tracker) keyfuncs.Func {
	if t == nil {
		return nil
	}
	return t.Config().Key
}
