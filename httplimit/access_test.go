package httplimit_test

import (
	"errors"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

func list(t testing.TB, lines ...string) *access.List {
	t.Helper()
	var es []access.Entry
	for _, l := range lines {
		e, err := access.ParseEntry(l)
		require.NoError(t, err, l)
		es = append(es, e)
	}
	l, err := access.NewList(es...)
	require.NoError(t, err)
	return l
}

func from(remote string, hdr ...string) *request {
	r := &request{remote: remote, header: http.Header{}}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.header.Add(hdr[i], hdr[i+1])
	}
	return r
}

const forbiddenBody = `{"error":"forbidden","message":"Access denied."}`

func TestAccessLists(t *testing.T) {
	userKey := func(r keyfuncs.Request) (string, error) {
		if u := r.Header("X-User"); u != "" {
			return "user:" + u, nil
		}
		return "", keyfuncs.ErrNoKey
	}
	behindProxy, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	peer, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	past := "expires=" + time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	future := "expires=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		name   string
		opts   []httplimit.Option
		req    *request
		status int    // 0: proceeds
		body   string // with status
		takes  int64  // store calls for the request
		key    keyfuncs.Func
	}{
		{name: "listed nowhere", req: from("192.0.2.1:1"), takes: 1,
			opts: []httplimit.Option{httplimit.WithAllowList(list(t, "198.51.100.0/24")), httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
		{name: "allow-listed range", req: from("198.51.100.7:1"),
			opts: []httplimit.Option{httplimit.WithAllowList(list(t, "198.51.100.0/24"))}},
		{name: "deny-listed range", req: from("203.0.113.9:1"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
		{name: "deny-listed IPv6 address in an IPv4-mapped form", req: from("[::ffff:203.0.113.9]:1"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.9"))}},
		{name: "deny-listed IPv6 range, zoned peer", req: from("[2001:db8:1::5%eth0]:1"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "2001:db8::/32"))}},
		{name: "one IPv6 address is not its /56 bucket", req: from("[2001:db8::6]:1"), takes: 1,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "2001:db8::5"))}},
		{name: "allow wins over deny", req: from("203.0.113.9:1"),
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.0/24")), httplimit.WithAllowList(list(t, "203.0.113.9"))}},
		{name: "expired deny entry", req: from("203.0.113.9:1"), takes: 1,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.9 "+past))}},
		{name: "expiring deny entry still live", req: from("203.0.113.9:1"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.9 "+future+" reason=scanner"))}},
		{name: "deny-listed key", req: from("192.0.2.1:1", "X-User", "42"), status: 403, body: forbiddenBody, key: userKey,
			opts: []httplimit.Option{httplimit.WithClientIP(peer), httplimit.WithDenyList(list(t, "user:42"))}},
		{name: "allow-listed key", req: from("192.0.2.1:1", "X-User", "7"), key: userKey,
			opts: []httplimit.Option{httplimit.WithClientIP(peer), httplimit.WithAllowList(list(t, "user:7")), httplimit.WithDenyList(list(t, "192.0.2.0/24"))}},
		{name: "a range matches whatever the key", req: from("203.0.113.9:1", "X-User", "7"), status: 403, body: forbiddenBody, key: userKey,
			opts: []httplimit.Option{httplimit.WithClientIP(peer), httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
		{name: "deny by address before a missing key's 400", req: from("203.0.113.9:1"), status: 403, body: forbiddenBody, key: userKey,
			opts: []httplimit.Option{httplimit.WithClientIP(peer), httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
		{name: "allow by address spares a missing key's 400", req: from("198.51.100.1:1"), key: userKey,
			opts: []httplimit.Option{httplimit.WithClientIP(peer), httplimit.WithAllowList(list(t, "198.51.100.0/24"))}},
		{name: "missing key, listed nowhere", req: from("192.0.2.1:1"), status: 400, key: userKey,
			opts: []httplimit.Option{httplimit.WithClientIP(peer), httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
		{name: "spoofed X-Forwarded-For does not allow", req: from("192.0.2.1:1", "X-Forwarded-For", "198.51.100.1", "X-Real-IP", "198.51.100.1"), takes: 1,
			opts: []httplimit.Option{httplimit.WithAllowList(list(t, "198.51.100.0/24"))}},
		{name: "spoofed X-Forwarded-For does not escape a deny", req: from("203.0.113.9:1", "X-Forwarded-For", "198.51.100.1"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.9"))}},
		{name: "behind a trusted proxy the client's hop is matched", req: from("10.0.0.2:1", "X-Forwarded-For", "198.51.100.1, 203.0.113.9"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithClientIP(behindProxy), httplimit.WithDenyList(list(t, "203.0.113.9"))}},
		{name: "behind a trusted proxy the leftmost entry is not believed", req: from("10.0.0.2:1", "X-Forwarded-For", "198.51.100.1, 203.0.113.9"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithClientIP(behindProxy), httplimit.WithAllowList(list(t, "198.51.100.1")), httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
		{name: "the proxy itself is not the client", req: from("10.0.0.2:1", "X-Forwarded-For", "203.0.113.9"), takes: 1,
			opts: []httplimit.Option{httplimit.WithClientIP(behindProxy), httplimit.WithDenyList(list(t, "10.0.0.0/8"))}},
		{name: "replaced responder reads the entry", req: from("203.0.113.9:1"), status: 451, body: "blocked: scanner",
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "203.0.113.9 reason=scanner")),
				httplimit.WithResponder(func(r keyfuncs.Request, w httplimit.Response, d core.Decision, err error) {
					if e := (access.Entry{}); errors.As(err, &e) {
						_ = w.Write(451, "text/plain", []byte("blocked: "+e.Reason))
						return
					}
					httplimit.DefaultResponder(r, w, d, err)
				})}},
		{name: "several deny lists add up", req: from("203.0.113.9:1"), status: 403, body: forbiddenBody,
			opts: []httplimit.Option{httplimit.WithDenyList(list(t, "192.0.2.0/24")), httplimit.WithDenyList(list(t, "203.0.113.0/24"))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &limitertest.Counting{Store: memStore(t)}
			f, err := newFlow(t, store, httplimit.Layer{Policy: perMinute, Key: tc.key}, nil, append([]httplimit.Option{
				httplimit.WithErrorHandler(func(keyfuncs.Request, error) {})}, tc.opts...)...)
			require.NoError(t, err)
			w := newResponse()
			proceed := handle(f, tc.req, w)
			assert.Equal(t, tc.takes, store.Takes(), "store calls")
			if tc.status == 0 {
				require.True(t, proceed, "status %d %s", w.status, w.body)
				assert.Zero(t, w.writes)
			} else {
				require.False(t, proceed)
				assert.Equal(t, tc.status, w.status)
				if tc.body != "" {
					assert.Equal(t, tc.body, w.body)
				}
			}
			if tc.takes == 0 {
				assert.Empty(t, w.header, "a listed client gets no rate-limit header")
			}
		})
	}
}

// TestAllowListedNeverLimited: an allow-listed client passes however often
// it comes, while its neighbour is limited, and the store never hears of
// it.
func TestAllowListedNeverLimited(t *testing.T) {
	store := &limitertest.Counting{Store: memStore(t)}
	f, err := newFlow(t, store, layer(perMinute), nil, httplimit.WithAllowList(list(t, "192.0.2.1")))
	require.NoError(t, err)
	for range 100 {
		require.True(t, handle(f, from("192.0.2.1:1"), newResponse()))
	}
	assert.Zero(t, store.Takes())
	require.True(t, handle(f, from("192.0.2.2:1"), newResponse()))
	w := newResponse()
	require.False(t, handle(f, from("192.0.2.2:1"), w))
	assert.Equal(t, 429, w.status)
}

// matcherFunc adapts a function to access.Matcher.
type matcherFunc func(netip.Addr, string, time.Time) (access.Entry, bool)

func (m matcherFunc) Match(a netip.Addr, k string, now time.Time) (access.Entry, bool) {
	return m(a, k, now)
}

// TestAccessSeesTheClient: the matchers get the resolved address, the
// limiter's key, and the time of the request.
func TestAccessSeesTheClient(t *testing.T) {
	var got struct {
		addr netip.Addr
		key  string
		now  time.Time
	}
	m := matcherFunc(func(a netip.Addr, k string, now time.Time) (access.Entry, bool) {
		got.addr, got.key, got.now = a, k, now
		return access.Entry{}, false
	})
	f, err := newFlow(t, memStore(t), layer(perMinute), nil, httplimit.WithDenyList(m))
	require.NoError(t, err)
	before := time.Now()
	require.True(t, handle(f, from("[::ffff:192.0.2.9]:1"), newResponse()))
	assert.Equal(t, netip.MustParseAddr("192.0.2.9"), got.addr)
	assert.Equal(t, "ip:192.0.2.9", got.key)
	assert.False(t, got.now.Before(before))
	assert.False(t, got.now.After(time.Now()))

	// A peer that is no address: the address is unknown (matches no
	// range), and the request gets the key function's 400.
	w := newResponse()
	require.False(t, handle(f, from("@unix"), w))
	assert.False(t, got.addr.IsValid())
	assert.Empty(t, got.key)
	assert.Equal(t, 400, w.status)
}

func TestAccessPanicsAreRecovered(t *testing.T) {
	boom := matcherFunc(func(netip.Addr, string, time.Time) (access.Entry, bool) { panic("list broke") })
	var errs []error
	f, err := newFlow(t, memStore(t), layer(perMinute), nil, httplimit.WithDenyList(boom),
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
	require.NoError(t, err)
	w := newResponse()
	require.False(t, handle(f, newRequest(), w))
	assert.Equal(t, 500, w.status)
	require.Len(t, errs, 1)
	var pe *httplimit.PanicError
	require.ErrorAs(t, errs[0], &pe)
	assert.Equal(t, "access list", panicIn(pe))

	f, err = newFlow(t, memStore(t), layer(perMinute), nil, httplimit.WithDenyList(list(t, "192.0.2.0/24")),
		httplimit.WithResponder(func(keyfuncs.Request, httplimit.Response, core.Decision, error) { panic("handler broke") }),
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
	require.NoError(t, err)
	w = newResponse()
	require.False(t, handle(f, newRequest(), w))
	assert.Equal(t, 500, w.status)
	require.ErrorAs(t, errs[len(errs)-1], &pe)
	assert.Equal(t, "responder", panicIn(pe))
}

func TestAccessOptionsReject(t *testing.T) {
	for name, opt := range map[string]httplimit.Option{
		"httplimit.WithAllowList: nil matcher":   httplimit.WithAllowList(nil),
		"httplimit.WithDenyList: nil matcher":    httplimit.WithDenyList(nil),
		"httplimit.WithClientIP: nil ClientIP":   httplimit.WithClientIP(nil),
		"httplimit.WithResponder: nil responder": httplimit.WithResponder(nil),
	} {
		_, err := newFlow(t, memStore(t), layer(perMinute), nil, opt)
		require.ErrorIs(t, err, core.ErrInvalidOption, name)
		assert.Equal(t, core.ErrInvalidOption.Error()+": "+name, err.Error())
	}
}

// TestListedRequestsAreObserved: the Limiter's observers hear the listed
// requests that never reach it, with their key.
func TestListedRequestsAreObserved(t *testing.T) {
	var events []core.Event
	obs := limitertest.Observer(func(e core.Event) { events = append(events, e) })
	peer, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	userKey := func(r keyfuncs.Request) (string, error) {
		if u := r.Header("X-User"); u != "" {
			return "user:" + u, nil
		}
		return "", keyfuncs.ErrNoKey
	}
	f, err := newFlow(t, memStore(t), httplimit.Layer{Policy: perMinute, Key: userKey}, []core.Option{core.WithObserver(obs)}, httplimit.WithClientIP(peer),
		httplimit.WithAllowList(list(t, "198.51.100.0/24")), httplimit.WithDenyList(list(t, "user:42", "203.0.113.0/24")))
	require.NoError(t, err)
	require.True(t, handle(f, from("198.51.100.1:1", "X-User", "7"), newResponse()))
	require.False(t, handle(f, from("192.0.2.1:1", "X-User", "42"), newResponse()))
	require.False(t, handle(f, from("203.0.113.1:1"), newResponse()), "no key, denied by address")
	require.True(t, handle(f, from("192.0.2.1:1", "X-User", "8"), newResponse()))
	require.Len(t, events, 4)
	assert.Equal(t, outcome.AllowListed, outcome.Of(&events[0].Decision))
	assert.Equal(t, "user:7", events[0].Key)
	assert.True(t, events[0].Decision.Allowed)
	assert.Equal(t, outcome.DenyListed, outcome.Of(&events[1].Decision))
	assert.Equal(t, "user:42", events[1].Key)
	assert.False(t, events[1].Decision.Allowed)
	assert.Equal(t, outcome.DenyListed, outcome.Of(&events[2].Decision))
	assert.Equal(t, "-", events[2].Key, "a listed request without a key")
	assert.Equal(t, outcome.Allowed, outcome.Of(&events[3].Decision))
}

// TestShadowMode: a Limiter in shadow mode never denies through the flow,
// writes no header unless asked, and never paces.
func TestShadowMode(t *testing.T) {
	var events []core.Event
	obs := limitertest.Observer(func(e core.Event) { events = append(events, e) })
	f, err := newFlow(t, memStore(t), layer(perMinute), []core.Option{core.WithShadow(), core.WithObserver(obs)})
	require.NoError(t, err)
	for i := range 3 {
		w := newResponse()
		require.True(t, handle(f, newRequest(), w), "request %d", i)
		assert.Empty(t, w.header, "request %d: no header in shadow mode", i)
		assert.Zero(t, w.writes)
	}
	require.Len(t, events, 3)
	assert.Equal(t, outcome.Allowed, outcome.Of(&events[0].Decision))
	assert.Equal(t, outcome.ShadowDenied, outcome.Of(&events[1].Decision))
	assert.Equal(t, outcome.ShadowDenied, outcome.Of(&events[2].Decision))

	// Headers when asked: the decision as made, no Retry-After.
	f, err = newFlow(t, memStore(t), layer(perMinute), []core.Option{core.WithShadow()}, httplimit.WithHeaders(headers.Config{XRateLimit: true, Draft6: true, RetryAfter: true}))
	require.NoError(t, err)
	w := newResponse()
	require.True(t, handle(f, newRequest(), w))
	assert.Equal(t, "0", w.header.Get("X-RateLimit-Remaining"))
	w = newResponse()
	require.True(t, handle(f, newRequest(), w))
	assert.Equal(t, "0", w.header.Get("X-RateLimit-Remaining"))
	assert.Empty(t, w.header.Get("Retry-After"))

	// Fail closed, shadowed: the request passes, the error is heard.
	var errs []error
	f, err = newFlow(t, failing{}, layer(limitertest.Named(perMinute, perMinute.Name, time.Second)), []core.Option{core.WithShadow()},
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
	require.NoError(t, err)
	require.True(t, handle(f, newRequest(), newResponse()))
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], limits.ErrStore)

	// A leaky bucket's Delay is not paced in shadow mode: with an hour's
	// cap, a paced request would not return within the bound below.
	leaky := core.Policy{Name: "leaky", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 5}
	f, err = newFlow(t, memStore(t), layer(leaky), []core.Option{core.WithShadow()}, httplimit.WithMaxDelay(time.Hour))
	require.NoError(t, err)
	require.True(t, handle(f, newRequest(), newResponse()))
	done := make(chan bool, 1)
	go func() { done <- handle(f, newRequest(), newResponse()) }() // Delay one hour
	select {
	case ok := <-done:
		assert.True(t, ok)
	case <-time.After(testwait.D(10 * time.Second)):
		t.Fatal("a shadow decision was paced")
	}
}

// TestListsWithKeyFuncNeedClientIP: a key function of its own and lists
// without WithClientIP could disagree about the client; New refuses it.
func TestListsWithKeyFuncNeedClientIP(t *testing.T) {
	ly := httplimit.Layer{Policy: perMinute}
	ly.Key = clientIPKey(t, keyfuncs.TrustedProxies("10.0.0.0/8"))
	for _, opt := range []httplimit.Option{httplimit.WithDenyList(list(t, "192.0.2.1")), httplimit.WithAllowList(list(t, "192.0.2.1"))} {
		_, err := newFlow(t, memStore(t), ly, nil, opt)
		require.ErrorIs(t, err, core.ErrInvalidOption)
		assert.Contains(t, err.Error(), "need WithClientIP")
		client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("10.0.0.0/8"))
		require.NoError(t, err)
		_, err = newFlow(t, memStore(t), ly, nil, opt, httplimit.WithClientIP(client))
		require.NoError(t, err)
	}
	_, err := newFlow(t, memStore(t), ly, nil)
	require.NoError(t, err, "no list, no address needed")
}
