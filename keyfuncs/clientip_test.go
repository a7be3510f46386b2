package keyfuncs

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
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
