package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/hooks"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// WithReputation scores the flow's clients with t, and enforces what t
// decides (see package reputation): t hears every request a limit
// denies or a lockout refuses, every deny-listed one, and, through Serve,
// every 401 and 403 answer and every 404 (a 404 for a path no route
// serves apart from one on a route that exists); t's bans are a deny list
// of the flow, answered 403 with Retry-After, and the problem type
// "abnormal-usage-detected" where problem details are enabled; and a band
// that scales limits scales the policy of every layer keyed like t (its
// Config.Key, by default the client address: the layers with no Key of
// their own), as a core.PolicySource after those of WithCore. A nil t is
// invalid.
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

// repKey is the key r's signals count toward: the Tracker's key
// function's, or the client address's; "" when there is none.
func (f *Flow) repKey(r keyfuncs.Request) string {
	var key string
	var err error
	if f.repOwn {
		key, err = hooks.ReputationKey(f.rep, r)
	} else {
		key, err = f.clientIP.Key(r)
	}
	if err != nil {
		return ""
	}
	return key
}

// repSignal scores signal s of r's client.
func (f *Flow) repSignal(r keyfuncs.Request, s reputation.Signal) {
	if key := f.repKey(r); key != "" {
		hooks.ReputationSignal(f.rep, context.WithoutCancel(r.Context()), key, uint8(s))
	}
}

// repResponse scores what the response of r's client, of status, says;
// ctx is the context its handler ran under, which reputation.MarkUnrouted
// may have marked.
func (f *Flow) repResponse(ctx context.Context, r keyfuncs.Request, key string, status int) {
	var s reputation.Signal
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		s = reputation.Refused
	case status == http.StatusNotFound && unrouted(r):
		s = reputation.Unrouted // no route serves the path: a scanner's
	case status == http.StatusNotFound:
		s = reputation.NotFound
	default:
		return
	}
	hooks.ReputationSignal(f.rep, context.WithoutCancel(ctx), key, uint8(s))
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
	if bans, ok := hooks.ReputationBans(c.rep).(access.Matcher); ok { // none in shadow mode
		c.repBans = bans
	}
	if hooks.ReputationScales(c.rep) {
		c.core = append(c.core, core.WithPolicySource(c.rep))
	}
}

// repBanned answers r, whose reputation key is rk and whose first
// layer's key is key, when the reputation has banned rk: 403 with
// Retry-After, as a deny list's refusal (the allow lists, checked
// before, win). It reports whether it did. The bans are the Tracker's
// own, by key: no address to parse, one atomic load and one lookup.
func (f *Flow) repBanned(st *state, r keyfuncs.Request, w Response, key, rk string) bool {
	if rk == "" {
		return false
	}
	e, ok := f.repBans.Match(netip.Addr{}, rk, time.Now())
	if !ok {
		return false
	}
	f.report(key, denyListed)
	f.forbid(st, r, w, e)
	return true
}

// unrouted reports whether no route served r, whose answer is a 404: its
// Route is empty, or its adapter says so by the framework's routing
// where Route cannot tell (Echo's e.RouteNotFound routes; Fiber's Route,
// under Use, is the middleware's).
func unrouted(r keyfuncs.Request) bool {
	if u, ok := r.(interface{ Unrouted() bool }); ok {
		return u.Unrouted()
	}
	return r.Route() == ""
}
