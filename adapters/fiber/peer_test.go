package fiberlimit_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// TestPeerAddrPort: the peer a request gives the IP key functions as a
// netip.AddrPort is the one RemoteAddr spells, and the key is the same
// either way; a peer that has no such form (a zone, no IP, not TCP) says
// so, and is read from RemoteAddr.
// peerRequest is the fast path of keyfuncs.ClientIP, which keyfuncs
// matches by this method set.
type peerRequest interface {
	keyfuncs.Request
	PeerAddrPort() (netip.AddrPort, bool)
}

func TestPeerAddrPort(t *testing.T) {
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	st, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })

	type seen struct {
		remote, key string
		ap          netip.AddrPort
		ok, isPeer  bool
	}
	var got seen
	keyFunc := func(r keyfuncs.Request) (string, error) {
		got = seen{remote: r.RemoteAddr()}
		var p peerRequest
		if p, got.isPeer = r.(peerRequest); got.isPeer {
			got.ap, got.ok = p.PeerAddrPort()
		}
		var err error
		got.key, err = ip(r)
		return "k", err
	}
	f, err := httplimit.New(st, []httplimit.Layer{{Policy: core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1000, Window: 60e9}, Key: keyFunc}})
	require.NoError(t, err)
	app := fiber.New()
	app.Use(fiberlimit.New(f))
	app.Get("/", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	h := app.Handler()

	for _, tc := range []struct {
		addr   net.Addr
		ok     bool
		remote string
		key    string
	}{
		{&net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51234}, true, "203.0.113.7:51234", "ip:203.0.113.7"},
		{&net.TCPAddr{IP: net.IP{203, 0, 113, 8}, Port: 1}, true, "203.0.113.8:1", "ip:203.0.113.8"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:1a0::7"), Port: 443}, true, "[2001:db8:1:1a0::7]:443", "ip:2001:db8:1:100::/56"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:198.51.100.1"), Port: 80}, true, "198.51.100.1:80", "ip:198.51.100.1"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 0}, true, "[::1]:0", "ip:::/56"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 8080, Zone: "eth0"}, false, "[fe80::1%eth0]:8080", "ip:fe80::/56"},
		{&net.TCPAddr{Port: 80}, false, "", ""},
		{&net.UnixAddr{Name: "/tmp/sock", Net: "unix"}, false, "/tmp/sock", ""},
	} {
		var req fasthttp.Request
		req.SetRequestURI("/")
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, tc.addr, nil)
		h(&ctx)
		require.True(t, got.isPeer, "%v", tc.addr)
		assert.Equal(t, tc.remote, got.remote, "%v", tc.addr)
		assert.Equal(t, tc.ok, got.ok, "%v", tc.addr)
		assert.Equal(t, tc.key, got.key, "%v", tc.addr)
		if tc.ok {
			assert.Equal(t, tc.remote, got.ap.String(), "%v: AddrPort is RemoteAddr", tc.addr)
			assert.Equal(t, fiber.StatusOK, ctx.Response.StatusCode())
		}
	}
}
