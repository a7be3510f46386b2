package adapterstest

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/rediswatch"
)

// banWithin is how soon a ban made on one app server must stop its client
// on every other: the second, on a quiet machine (testwait).
var banWithin = testwait.D(time.Second)

var banPrefixes atomic.Int64

// RunBans checks bans over real sockets. In process (access.Bans): a ban
// from code stops its client at its next request, an unban lets it back.
// Through Redis (rediswatch): two app servers, each with its own Limiter
// and its own rediswatch.Bans over one real redis-server, and two clients
// behind a trusted proxy; a ban made on server A stops client 1 on server
// B within a second, client 2 passing all along, and an unban on B lets
// client 1 back in on A within a second; a ban by key works the same.
func RunBans(t *testing.T, h SocketHarness, srv *redistest.Server) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	one := hdr("X-Forwarded-For", "198.51.100.1")
	two := hdr("X-Forwarded-For", "198.51.100.2")
	get := func(addr string, h map[string][]string) int {
		return Send(t, addr, RawRequest{Header: h}).Status
	}

	t.Run("in process", func(t *testing.T) {
		bans, err := access.NewBans(0)
		require.NoError(t, err)
		m := NewMount(t, NewStore(t), httplimit.Layer{Policy: fixed("bans", 1000)}, nil, httplimit.WithClientIP(client), httplimit.WithDenyList(bans))
		addr := h.Serve(t, &Spec{Global: []Mount{m},
			Routes: []Route{{Method: "GET", Path: "/"}}})
		require.Equal(t, 200, get(addr, one))
		_, err = bans.Ban(access.Entry{Prefix: netip.MustParsePrefix("198.51.100.1/32"), Reason: "credential stuffing"}, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 403, get(addr, one), "banned at once")
		require.Equal(t, 200, get(addr, two))
		ok, err := bans.Unban(access.Entry{Prefix: netip.MustParsePrefix("198.51.100.1/32")})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 200, get(addr, one), "unbanned at once")
	})

	t.Run("through Redis, two servers", func(t *testing.T) {
		prefix := fmt.Sprintf("bans%d", banPrefixes.Add(1))
		var servers []string
		var sets []*rediswatch.Bans
		for range 2 {
			b, err := rediswatch.NewBans(context.Background(), srv.Client(), rediswatch.WithKey(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Close() })
			key := func(r keyfuncs.Request) (string, error) {
				if u := r.Header("X-User"); u != "" {
					return "user:" + u, nil
				}
				return client.Key(r)
			}
			sets = append(sets, b)
			servers = append(servers, h.Serve(t, &Spec{
				Global: []Mount{NewMount(t, NewStore(t), httplimit.Layer{Policy: fixed("bans", 1000), Key: key}, nil,
					httplimit.WithClientIP(client), httplimit.WithDenyList(b))},
				Routes: []Route{{Method: "GET", Path: "/"}}}))
		}
		a, b := servers[0], servers[1]
		for _, s := range servers {
			require.Equal(t, 200, get(s, one))
			require.Equal(t, 200, get(s, two))
		}
		ctx := context.Background()
		_, err := sets[0].Ban(ctx, access.Entry{Prefix: netip.MustParsePrefix("198.51.100.1/32"), Reason: "abuse"}, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 403, get(a, one), "in force on the server that banned before Ban returns")
		start := time.Now()
		require.Eventually(t, func() bool { return get(b, one) == 403 }, banWithin, 20*time.Millisecond, "ban not seen on server B within %v", banWithin)
		t.Logf("ban seen on the other server after %v", time.Since(start).Round(time.Millisecond))
		assert.Equal(t, 200, get(b, two), "client 2 is not banned")
		assert.Equal(t, 200, get(a, two))

		_, err = sets[1].Unban(ctx, access.Entry{Prefix: netip.MustParsePrefix("198.51.100.1/32")})
		require.NoError(t, err)
		require.Equal(t, 200, get(b, one))
		require.Eventually(t, func() bool { return get(a, one) == 200 }, banWithin, 20*time.Millisecond, "unban not seen on server A within %v", banWithin)

		// By key, expiring: the ban ends on both servers by Redis's TTL.
		user := hdr("X-User", "42")
		_, err = sets[1].Ban(ctx, access.Entry{Key: "user:42"}, 1500*time.Millisecond)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return get(a, user) == 403 }, banWithin, 20*time.Millisecond, "ban by key not seen on server A within %v", banWithin)
		require.Equal(t, 403, get(b, user))
		require.Eventually(t, func() bool { return get(a, user) == 200 && get(b, user) == 200 }, testwait.D(3*time.Second), 50*time.Millisecond,
			"an expired ban still refuses")
	})
}
