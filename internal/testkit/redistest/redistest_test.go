package redistest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	c := s.Client()
	require.NoError(t, c.Set(ctx, "redistest:k", "v", time.Minute).Err())
	if s.External() {
		t.Skip("REDIS_URL is set: freeze, kill and restart are for local servers only")
	}
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, s.Addr(), "a loopback address")
	require.NotEqual(t, 6379, s.Port(), "a port off Redis's default")

	s.Freeze()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	fast := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer fast.Close()
	require.Error(t, fast.Ping(short).Err(), "PING answered while frozen")
	cancel()
	s.Thaw()
	require.ErrorIs(t, c.Get(ctx, "redistest:none").Err(), redis.Nil, "GET after thaw")

	port := s.Port()
	s.Kill()
	require.Error(t, ping(s.Addr()), "PING answered after Kill")
	s.Restart()
	require.Equal(t, port, s.Port(), "the port after a restart")
	// A restart loses the data; the old client reconnects by itself.
	require.Eventually(t, func() bool {
		return c.Get(ctx, "redistest:k").Err() == redis.Nil
	}, testwait.D(5*time.Second), 20*time.Millisecond, "GET after restart never answered redis.Nil")
}

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	cl := c.Client()
	masters := map[string]bool{}
	for i := range 50 {
		k := fmt.Sprintf("redistest:%d", i)
		require.NoError(t, cl.Set(ctx, k, i, time.Minute).Err(), k)
		n, err := cl.MasterForKey(ctx, k)
		require.NoError(t, err, k)
		masters[n.Options().Addr] = true
	}
	assert.Len(t, masters, 3, "the masters 50 keys landed on")
}

// TestPortTaken: a port taken between picking and binding costs a retry on
// another port, not a failure.
func TestPortTaken(t *testing.T) {
	bin := lookPath(t, "redis-server")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	busy := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	s := startLocal(t, bin, nil, func() (int, error) {
		picks++
		if picks == 1 {
			return busy, nil
		}
		return freePort()
	})
	assert.Equal(t, 2, picks, "ports picked")
	assert.NotEqual(t, busy, s.Port(), "started on the taken port")
	require.NoError(t, ping(s.Addr()))
}
