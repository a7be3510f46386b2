package sloglimit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
	sloglimit "github.com/apigate/ratelimit/observe/slog"
)

// TestSafeKey lists the keys shown as they are under KeysSafe, and
// near misses that are not.
func TestSafeKey(t *testing.T) {
	hex32, hex64 := strings.Repeat("0123456789abcdef", 2), strings.Repeat("0123456789abcdef", 4)
	for key, want := range map[string]bool{
		"ip:203.0.113.7":                       true,
		"ip:203.0.113.0/24":                    true,
		"ip:2001:db8:1:100::/56":               true,
		"ip:2001:db8::7":                       true,
		"ip:::ffff:203.0.113.7":                true, // an address all the same
		"key:" + hex32:                         true,
		"sha256:" + hex64:                      true,
		"ip:203.0.113.7|key:" + hex32:          true,
		"key:" + hex32 + "|ip:2001:db8::/32":   true,
		"ip:203.0.113.7|ip:198.51.100.1":       true,
		"ip:":                                  false,
		"ip:203.0.113.7:4711":                  false,
		"ip:203.0.113.7/24":                    false, // not masked
		"ip:2001:DB8::7":                       false, // not canonical
		"ip:2001:0db8::7":                      false,
		"ip:fe80::1%eth0":                      false, // a zone is free text
		"ip:sk_live_abc":                       false,
		"ip: 203.0.113.7":                      false,
		"key:" + strings.ToUpper(hex32):        false,
		"key:" + hex32[:31]:                    false,
		"key:" + hex32 + "0":                   false,
		"key:" + hex32[:31] + "g":              false,
		"sha256:" + hex32:                      false,
		"key:sk_live_abc":                      false,
		"user:alice":                           false,
		"route:GET /users/{id}|ip:203.0.113.7": false,
		"ip:203.0.113.7|":                      false,
		"|ip:203.0.113.7":                      false,
		"ip:203.0.113.7|user:alice":            false,
		"static:global":                        false,
		"203.0.113.7":                          false,
		"":                                     false,
	} {
		assert.Equal(t, want, sloglimit.SafeKey(key), "%q", key)
	}
}

// request is a keyfuncs.Request over an *http.Request.
type request struct {
	r     *http.Request
	route string
}

func (q request) RemoteAddr() string                { return q.r.RemoteAddr }
func (q request) Header(name string) string         { return q.r.Header.Get(name) }
func (q request) HeaderValues(name string) []string { return q.r.Header.Values(name) }
func (q request) Method() string                    { return q.r.Method }
func (q request) Route() string                     { return q.route }
func (request) Unrouted() bool                      { return false }
func (q request) Path() string                      { return q.r.URL.Path }
func (q request) Context() context.Context          { return q.r.Context() }

// must returns f, panicking on err.
func must(f keyfuncs.Func, err error) keyfuncs.Func {
	if err != nil {
		panic(err)
	}
	return f
}

// sha returns what key_hash shows for key without a key secret.
func sha(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:8])
}

// normalized returns key as the store sees it (see limits.MaxKeyLen).
func normalized(key string) (string, error) {
	if len(key) <= limits.MaxKeyLen && !strings.ContainsAny(key, " {}") {
		return key, nil
	}
	s := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(s[:]), nil
}

// TestKeyfuncsKeys: keys that keyfuncs makes from IP addresses and API
// keys are shown as they are; the others only as digests.
func TestKeyfuncsKeys(t *testing.T) {
	ctx := context.Background()
	const apiKey = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	clientIP24, err := keyfuncs.NewClientIP(keyfuncs.Prefixes(24, 56))
	require.NoError(t, err)
	ip24 := clientIP24.Key
	apikey := must(keyfuncs.APIKeyHeader("X-API-Key", nil))
	user := must(keyfuncs.User(func(context.Context) (string, bool) { return "alice@example.com", true }))
	routeIP := must(keyfuncs.Compose(keyfuncs.Route(), ip))
	staticIP := must(keyfuncs.Compose(must(keyfuncs.Static("global")), ip))
	apikeyIP := must(keyfuncs.Compose(apikey, ip))
	cases := []struct {
		name   string
		fn     keyfuncs.Func
		remote string
		shown  bool
	}{
		{"IPv4", ip, "203.0.113.7:4711", true},
		{"IPv4 /24", ip24, "203.0.113.7:4711", true},
		{"IPv6 /56", ip, "[2001:db8:1:1a0::7]:4711", true},
		{"IPv4-mapped", ip, "[::ffff:203.0.113.7]:4711", true},
		{"API key", apikey, "203.0.113.7:4711", true},
		{"API key and IP", apikeyIP, "203.0.113.7:4711", true},
		{"user", user, "203.0.113.7:4711", false},
		{"static and IP", staticIP, "203.0.113.7:4711", false},
		// "route:GET /users/{id}|ip:..." has a space and braces: the
		// core replaces it by its "sha256:" digest, which is shown.
		{"route and IP", routeIP, "203.0.113.7:4711", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodGet, "http://example.com/users/7", nil)
			require.NoError(t, err)
			r.RemoteAddr = tc.remote
			r.Header.Set("X-API-Key", apiKey)
			key, err := tc.fn(request{r: r, route: "/users/{id}"})
			require.NoError(t, err)

			c, s := new(clock), newSink()
			l := newLimiter(t, newMemStore(t), hourly, core.WithObserver(newLogger(t, s, c)))
			for range 2 {
				_, err := l.AllowN(ctx, key, 1, t0)
				require.NoError(t, err)
			}
			out := s.text()
			assert.NotContains(t, out, apiKey)
			assert.NotContains(t, out, "alice")
			recs := s.records(t)
			require.Len(t, recs, 1)
			if key, err = normalized(key); tc.shown {
				require.NoError(t, err)
				assert.Equal(t, key, recs[0]["key"])
				assert.NotContains(t, recs[0], "key_hash")
			} else {
				assert.Equal(t, sha(key), recs[0]["key_hash"])
				assert.NotContains(t, recs[0], "key")
			}
		})
	}
}

// TestRawSecretNeverLogged gives a Limiter raw secrets, as a key function
// of your own might, and drives every outcome, with every key mode but
// KeysRaw: the secret never reaches the log, not even through a store
// error that names the key.
func TestRawSecretNeverLogged(t *testing.T) {
	ctx := context.Background()
	const secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	keys := []string{
		secret,
		"user:" + secret,
		"ip:" + secret,
		"key:" + secret,
		"sha256:" + secret,
		"ip:203.0.113.7|" + secret,
		"key:4eC39HqLyjWDarjtT1zdp7dc0123456", // 32 characters, not all hex
		secret + strings.Repeat("x", limits.MaxKeyLen), // the core hashes it
	}
	modes := []sloglimit.KeyMode{sloglimit.KeysSafe, sloglimit.KeysHashed, sloglimit.KeysHidden}
	for _, mode := range modes {
		for _, everything := range []bool{false, true} {
			c, s := new(clock), newSink()
			opts := []sloglimit.Option{sloglimit.WithKeys(mode, nil)}
			if everything {
				opts = append(opts, sloglimit.WithOutcomes(outcomeNames()...))
			}
			lg := newLogger(t, s, c, opts...)
			f := &flaky{Store: newMemStore(t)}
			limiters := []*core.Limiter{
				newLimiter(t, f, hourly, core.WithObserver(lg), core.WithDenyCache(10)),
				newLimiter(t, f, core.Policy{Name: "closed", Algorithm: core.SlidingWindowLog, Limit: 1, Window: time.Hour, FailClosed: time.Second},
					core.WithObserver(lg)),
				newLimiter(t, f, core.Policy{Name: "fallback", Algorithm: core.TokenBucket, Limit: 1, Window: time.Hour},
					core.WithObserver(lg), core.WithFallback(newMemStore(t)), core.WithCircuitBreaker(2, time.Second)),
				newLimiter(t, f, core.Policy{Name: "open", Algorithm: core.LeakyBucket, Limit: 1, Window: time.Hour}, core.WithObserver(lg)),
			}
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			for _, l := range limiters {
				for _, key := range keys {
					f.down.Store(true)
					for range 4 { // failed open or closed, fallback; circuit open
						_, _ = l.AllowN(ctx, key, 1, c.Now())
					}
					c.Advance(time.Hour) // room for every record, a probe
					f.down.Store(false)
					for range 3 { // allowed, denied, deny cache (on the first)
						_, _ = l.AllowN(ctx, key, 1, c.Now())
					}
					_, _ = l.AllowN(canceled, key, 1, c.Now())
					c.Advance(time.Hour)
				}
			}
			out := s.text()
			require.NotEmpty(t, out)
			for _, part := range []string{secret, "4eC39Hq", "sk_live"} {
				assert.NotContains(t, out, part, "mode %v, all outcomes %v", mode, everything)
			}
			recs := s.records(t)
			outcomes, attrs := map[string]bool{}, map[string]int{}
			for _, r := range recs {
				outcomes[r["outcome"].(string)] = true
				for _, a := range []string{"key", "key_hash"} {
					if _, ok := r[a]; ok {
						attrs[a]++
					}
				}
				switch mode {
				case sloglimit.KeysHidden:
					assert.NotContains(t, r, "key")
					assert.NotContains(t, r, "key_hash")
				case sloglimit.KeysHashed:
					assert.NotContains(t, r, "key")
				}
				if e, _ := r["error"].(string); strings.Contains(e, "take ") {
					shown := "[key]" // the key is shown as it is, or its text is replaced
					if k, ok := r["key"].(string); ok {
						shown = k
					}
					assert.Contains(t, e, "take "+shown+": connection refused")
				}
			}
			want := []string{"denied", "deny_cache", "failed_closed", "failed_open", "fallback_allowed", "fallback_denied"}
			if everything {
				want = append(want, "allowed", "canceled")
			}
			switch mode { // the long key is the core's digest: shown when safe
			case sloglimit.KeysSafe:
				assert.Positive(t, attrs["key"])
				assert.Greater(t, attrs["key_hash"], 6*attrs["key"])
			case sloglimit.KeysHashed:
				assert.Positive(t, attrs["key_hash"])
			}
			for _, o := range want {
				assert.True(t, outcomes[o], "mode %v: no %s record", mode, o)
			}
		}
	}
}

// TestKeyModes shows one IP key and one user key under each mode.
func TestKeyModes(t *testing.T) {
	ctx := context.Background()
	secret := []byte("log secret")
	hm := func(key string) string {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(key))
		return hex.EncodeToString(m.Sum(nil)[:8])
	}
	type shown struct{ key, hash string }
	cases := []struct {
		name     string
		opts     []sloglimit.Option
		ip, user shown
	}{
		{"safe", nil, shown{key: "ip:203.0.113.7"}, shown{hash: sha("user:alice")}},
		{"safe, keyed", []sloglimit.Option{sloglimit.WithKeys(sloglimit.KeysSafe, secret)}, shown{key: "ip:203.0.113.7"}, shown{hash: hm("user:alice")}},
		{"hashed", []sloglimit.Option{sloglimit.WithKeys(sloglimit.KeysHashed, nil)}, shown{hash: sha("ip:203.0.113.7")}, shown{hash: sha("user:alice")}},
		{"hashed, keyed", []sloglimit.Option{sloglimit.WithKeys(sloglimit.KeysHashed, secret)},
			shown{hash: hm("ip:203.0.113.7")}, shown{hash: hm("user:alice")}},
		{"raw", []sloglimit.Option{sloglimit.WithKeys(sloglimit.KeysRaw, nil)}, shown{key: "ip:203.0.113.7"}, shown{key: "user:alice"}},
		{"hidden", []sloglimit.Option{sloglimit.WithKeys(sloglimit.KeysHidden, nil)}, shown{}, shown{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := new(clock), newSink()
			l := newLimiter(t, newMemStore(t), hourly, core.WithObserver(newLogger(t, s, c, tc.opts...)))
			for _, key := range []string{"ip:203.0.113.7", "user:alice"} {
				for range 2 {
					_, err := l.AllowN(ctx, key, 1, t0)
					require.NoError(t, err)
				}
			}
			recs := s.records(t)
			require.Len(t, recs, 2)
			for i, want := range []shown{tc.ip, tc.user} {
				key, _ := recs[i]["key"].(string)
				hash, _ := recs[i]["key_hash"].(string)
				assert.Equal(t, want, shown{key, hash}, "record %d", i)
			}
		})
	}
}
