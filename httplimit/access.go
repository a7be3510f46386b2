package httplimit

import (
	"net/netip"
	"time"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/keyfuncs"
)

// inAccess names the list lookups in a PanicError.
const inAccess = "access list"

// WithClientIP sets who the client is, by address, for the allow and deny
// lists (WithAllowList, WithDenyList) and, for every Layer without a Key
// of its own, for the limiter (c.Key). Build c with the same
// trust model as the limiter's key (keyfuncs.NewClientIP with the same
// TrustedProxies): the lists are then matched against the address the
// limiter believes, so a forged X-Forwarded-For can neither move a client
// onto an allow list nor off a deny list. The default is
// keyfuncs.NewClientIP(), the socket peer, with no header believed; but
// with a Layer's own Key, lists need WithClientIP said explicitly (New
// fails without it), since a key function given its own TrustedProxies would
// otherwise disagree with the lists about who the client is. A nil c is
// invalid.
func WithClientIP(c *keyfuncs.ClientIP) Option {
	return func(cfg *config) error {
		if c == nil {
			return invalid("WithClientIP", "nil ClientIP")
		}
		cfg.clientIP = c
		return nil
	}
}

// WithAllowList exempts the clients m matches: their requests pass
// without a store call, a decision or a rate-limit header. m is matched
// against the client's address (WithClientIP) and the key the key
// function returns, at the time of the request; several WithAllowList
// options add up, as do any number of access.List, accessfile.File and bans.
// Allow wins over deny: a request that an allow list and a deny list both
// match passes. A nil m is invalid.
func WithAllowList(m access.Matcher) Option {
	return func(c *config) error {
		if m == nil {
			return invalid("WithAllowList", "nil matcher")
		}
		c.allow = append(c.allow, m)
		return nil
	}
}

// WithDenyList refuses the clients m matches: their requests are answered
// at once by the Responder (403 by default), without a store call,
// unless an allow list matches them too. m is matched as WithAllowList
// says: against the client's address and its key. An address range
// matches whatever the key function is; a key entry only the key the key
// function returns for the request ("user:42", or keyfuncs' hashed
// "key:..." for an API key). Several WithDenyList options add up. The
// lists are checked after WithSkip: a skipped request (a health check, a
// metrics scrape) is checked against no list, so skip only what a banned
// client may reach. A nil m is invalid.
func WithDenyList(m access.Matcher) Option {
	return func(c *config) error {
		if m == nil {
			return invalid("WithDenyList", "nil matcher")
		}
		c.deny403 = append(c.deny403, m)
		return nil
	}
}

// lists is what the allow and deny lists decided for one request.
type listed uint8

const (
	notListed listed = iota
	allowListed
	denyListed
)

// check matches the request's client against the allow lists, then the
// deny lists; key is "" when the key function failed.
func (f *Flow) check(st *state, r keyfuncs.Request, key string) (listed, access.Entry) {
	st.in = inAccess
	addr, err := f.clientIP.Addr(r)
	if err != nil {
		addr = netip.Addr{} // matches no range; a key entry may still match
	}
	now := time.Now()
	for _, m := range f.allow {
		if e, ok := m.Match(addr, key, now); ok {
			return allowListed, e
		}
	}
	for _, m := range f.deny403 {
		if e, ok := m.Match(addr, key, now); ok {
			return denyListed, e
		}
	}
	return notListed, access.Entry{}
}

// unknownKey stands for the key of a listed request whose key function
// failed, in what the Limiter's observers hear.
const unknownKey = "-"

// report tells the Limiter's observers of a listed request, as of cost 1:
// the cost function is not asked for a request that is not decided.
func (f *Flow) report(key string, l listed) {
	if key == "" {
		key = unknownKey
	}
	_ = f.limiter.Observe(key, 1, l == allowListed) // key and cost are valid
}

// listed answers r when a list matches its client, whose keys under the
// layers that apply are keys: it reports whether it did, and whether r
// then proceeds (allow-listed) or was refused (deny-listed).
func (f *Flow) listed(st *state, r keyfuncs.Request, w Response, keys []string) (done, proceed bool) {
	switch l, e := f.checkKeys(st, r, keys); l {
	case allowListed:
		f.reportKeys(keys, l)
		return true, f.proceed(st, r.Context(), r, w)
	case denyListed:
		f.reportKeys(keys, l)
		f.forbid(st, r, w, e)
		return true, false
	}
	return false, false
}

// checkKeys is check for a layered request: the client's address and the
// key of every layer that applies are matched against the allow lists,
// then the deny lists, so that allow wins over deny whatever the layer.
func (f *Flow) checkKeys(st *state, r keyfuncs.Request, keys []string) (listed, access.Entry) {
	if len(keys) <= 1 {
		k := ""
		if len(keys) == 1 {
			k = keys[0]
		}
		return f.check(st, r, k)
	}
	st.in = inAccess
	addr, err := f.clientIP.Addr(r)
	if err != nil {
		addr = netip.Addr{} // matches no range; a key entry may still match
	}
	now := time.Now()
	if e, ok := matchAny(f.allow, addr, keys, now); ok {
		return allowListed, e
	}
	if e, ok := matchAny(f.deny403, addr, keys, now); ok {
		return denyListed, e
	}
	return notListed, access.Entry{}
}

// matchAny returns the first entry of ms matching addr with any of keys.
func matchAny(ms []access.Matcher, addr netip.Addr, keys []string, now time.Time) (access.Entry, bool) {
	for _, m := range ms {
		for _, k := range keys {
			if e, ok := m.Match(addr, k, now); ok {
				return e, true
			}
		}
	}
	return access.Entry{}, false
}

// reportKeys is report for a layered request, as of its first layer's key.
func (f *Flow) reportKeys(keys []string, l listed) {
	k := ""
	if len(keys) > 0 {
		k = keys[0]
	}
	f.report(k, l)
}
