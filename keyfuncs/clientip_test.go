package keyfuncs

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
)

// TestClientIPAgreesWithIP checks that Addr and Key follow one trust
// model: the address that Addr reports is the one Key keys on, for every
// trust model and every hostile header form, and Key is IP's key.
func TestClientIPAgreesWithIP(t *testing.T) {
	models := map[string][]IPOption{
		"socket peer":     nil,
		"trusted proxies": {TrustedProxies("10.0.0.0/8", "fd00::/8")},
		"forwarded":       {TrustedProxies("10.0.0.0/8"), UseForwarded()},
		"trusted header":  {TrustedHeader("X-Real-IP")},
		"header behind":   {TrustedProxies("10.0.0.0/8"), TrustedHeader("CF-Connecting-IP")},
		"prefixes":        {Prefixes(24, 64)},
	}
	reqs := []*fakeRequest{
		{remote: "203.0.113.7:1"},
		{remote: "10.0.0.2:1", headers: map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.9"}}},
		{remote: "10.0.0.2:1", headers: map[string][]string{"X-Forwarded-For": {"garbage, 10.0.0.3"}}},
		{remote: "10.0.0.2:1", headers: map[string][]string{"Forwarded": {`for="[2001:db8::1]:80"`}}},
		{remote: "10.0.0.2:1", headers: map[string][]string{"X-Real-Ip": {"6.6.6.6"}, "Cf-Connecting-Ip": {"198.51.100.1"}}},
		{remote: "[::ffff:203.0.113.8]:1"},
		{remote: "[fe80::1%eth0]:1"},
		{remote: "[2001:db8:1:1a0::7]:1"},
		{remote: "[fd00::5]:1", headers: map[string][]string{"X-Forwarded-For": {"2001:db8::9"}}},
	}
	for name, opts := range models {
		c, err := NewClientIP(opts...)
		require.NoError(t, err, name)
		ip, err := clientIPKey(opts...)
		require.NoError(t, err, name)
		for _, req := range reqs {
			a, err := c.Addr(req)
			require.NoError(t, err, "%s %s", name, req.remote)
			assert.False(t, a.Is4In6(), "%s %s: %s not folded", name, req.remote, a)
			assert.Empty(t, a.Zone(), "%s %s", name, req.remote)
			want, err := ip(req)
			require.NoError(t, err)
			key, err := c.Key(req)
			require.NoError(t, err)
			assert.Equal(t, want, key, "%s %s", name, req.remote)
			assert.Equal(t, c.r.format(a), key, "%s %s: Addr %s is not what Key keys on", name, req.remote, a)
		}
	}
}

// TestClientIPIgnoresSpoofing: with no trusted proxy, no header moves the
// address; behind a proxy, the client's own leftmost entry is not
// believed.
func TestClientIPIgnoresSpoofing(t *testing.T) {
	c, err := NewClientIP()
	require.NoError(t, err)
	spoof := map[string][]string{
		"X-Forwarded-For": {"10.9.9.9"}, "X-Real-Ip": {"10.9.9.9"},
		"Forwarded": {"for=10.9.9.9"}, "True-Client-Ip": {"10.9.9.9"},
	}
	a, err := c.Addr(&fakeRequest{remote: "203.0.113.7:1", headers: spoof})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("203.0.113.7"), a)

	c, err = NewClientIP(TrustedProxies("10.0.0.0/8"))
	require.NoError(t, err)
	a, err = c.Addr(&fakeRequest{remote: "10.0.0.2:1", headers: map[string][]string{
		"X-Forwarded-For": {"192.0.2.1, 198.51.100.9"},
	}})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("198.51.100.9"), a, "the hop the proxy saw, not the client's leftmost entry")
}

func TestClientIPErrors(t *testing.T) {
	_, err := NewClientIP(UseForwarded())
	require.ErrorIs(t, err, core.ErrInvalidOption)
	_, err = NewClientIP(nil)
	require.ErrorIs(t, err, core.ErrInvalidOption)

	c, err := NewClientIP()
	require.NoError(t, err)
	_, err = c.Addr(&fakeRequest{remote: "pipe"})
	require.ErrorIs(t, err, ErrNoKey)
	_, err = c.Key(&fakeRequest{remote: "pipe"})
	require.ErrorIs(t, err, ErrNoKey)
}

// TestClientIPReportsForwarding: a ClientIP that trusts no proxy logs,
// through slog.Default, exactly one Warn record for the requests that
// come with X-Forwarded-For, from goroutines at once (run with -race),
// through Addr and Key alike, naming TrustedProxies and never the
// header's value nor an address. Another ClientIP reports on its own (a
// Forwarded header); one that trusts a proxy or a header, or a request
// without either header, logs nothing.
func TestClientIPReportsForwarding(t *testing.T) {
	var logs syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	records := func() []map[string]any {
		t.Helper()
		var recs []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if line == "" {
				continue
			}
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
			recs = append(recs, rec)
		}
		return recs
	}

	c, err := NewClientIP()
	require.NoError(t, err)
	for range 3 {
		_, err := c.Key(req("203.0.113.7:1", "X-Real-IP", "10.9.9.9")) // not a forwarding header
		require.NoError(t, err)
	}
	require.Empty(t, logs.String(), "no forwarding header, no record")

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				r := req("203.0.113.7:1", "X-Forwarded-For", "10.9.9.9, 198.51.100.9")
				_, err := c.Key(r)
				assert.NoError(t, err)
				if (g+i)%2 == 0 {
					_, err = c.Addr(r)
					assert.NoError(t, err)
				}
			}
		})
	}
	wg.Wait()
	recs := records()
	require.Len(t, recs, 1, "one record for 400 requests: %s", logs.String())
	assert.Equal(t, "WARN", recs[0]["level"])
	assert.Equal(t, msgForwarding, recs[0]["msg"])
	assert.Contains(t, recs[0]["msg"], "every client behind it shares one quota")
	assert.Contains(t, recs[0]["msg"], "keyfuncs.TrustedProxies")
	assert.Equal(t, "X-Forwarded-For", recs[0]["header"])
	for _, never := range []string{"10.9.9.9", "198.51.100.9", "203.0.113.7"} {
		assert.NotContains(t, logs.String(), never, "never the header's value nor an address")
	}

	// Another ClientIP reports on its own.
	other, err := NewClientIP(Prefixes(24, 64))
	require.NoError(t, err)
	for range 2 {
		_, err := other.Key(req("203.0.113.7:1", "Forwarded", "for=10.9.9.9"))
		require.NoError(t, err)
	}
	recs = records()
	require.Len(t, recs, 2, logs.String())
	assert.Equal(t, "WARN", recs[1]["level"])
	assert.Equal(t, "Forwarded", recs[1]["header"])

	// A ClientIP that trusts a proxy, or a header, reads what it trusts:
	// nothing to report, from a trusted peer or not.
	for _, opts := range [][]IPOption{
		{TrustedProxies("10.0.0.0/8")},
		{TrustedProxies("10.0.0.0/8"), UseForwarded()},
		{TrustedHeader("CF-Connecting-IP")},
	} {
		trusting, err := NewClientIP(opts...)
		require.NoError(t, err)
		for _, peer := range []string{"10.0.0.2:1", "203.0.113.7:1"} {
			_, err := trusting.Key(req(peer, "X-Forwarded-For", "10.9.9.9", "Forwarded", "for=10.9.9.9"))
			require.NoError(t, err)
		}
	}
	assert.Len(t, records(), 2, logs.String())
}

// TestClientIPForwardingCheckEnds: a ClientIP looks for a forwarding
// header in its first forwardingChecks requests only (a proxy adds one
// to every request): one that came after them without one is not
// reported, and the check is then one atomic load.
func TestClientIPForwardingCheckEnds(t *testing.T) {
	var logs syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	c, err := NewClientIP()
	require.NoError(t, err)
	plain := req("203.0.113.7:1")
	for range forwardingChecks {
		_, err := c.Key(plain)
		require.NoError(t, err)
	}
	require.Equal(t, int64(forwardingChecks), c.r.checks.Load(), "every request so far checked")
	_, err = c.Key(req("203.0.113.7:1", "X-Forwarded-For", "10.9.9.9"))
	require.NoError(t, err)
	assert.Equal(t, int64(forwardingChecks), c.r.checks.Load(), "the check is over: the request was not looked at")
	assert.Empty(t, logs.String(), "a forwarding header after the first requests is not reported")
}

// TestClientIPForwardingCheckAllocs: the check costs no allocation,
// before the report (a request without a forwarding header) or after it.
func TestClientIPForwardingCheckAllocs(t *testing.T) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	c, err := NewClientIP()
	require.NoError(t, err)
	plain := req("203.0.113.7:1")
	forwarded := req("203.0.113.7:1", "X-Forwarded-For", "10.9.9.9")
	_, _ = c.Key(plain) // the key cache may take an entry
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = c.Addr(plain) }), "before the report")
	_, err = c.Key(forwarded) // the report
	require.NoError(t, err)
	require.GreaterOrEqual(t, c.r.checks.Load(), int64(checkOver), "reported")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = c.Addr(forwarded) }), "after the report")
}

// TestForwardingMessageDocumented: docs/monitoring.md quotes the message
// of the check exactly.
func TestForwardingMessageDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/monitoring.md")
	require.NoError(t, err)
	assert.Contains(t, string(doc), "`"+msgForwarding+"`")
}
