package redistest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartWith: the arguments reach the server, which is a local one
// even when REDIS_URL is set, and survive a Restart.
func TestStartWith(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0") // never used
	s := StartWith(t, "--maxmemory", "3mb", "--maxmemory-policy", "volatile-ttl")
	require.False(t, s.External())
	ctx := context.Background()
	c := s.Client()
	check := func() {
		t.Helper()
		got, err := c.ConfigGet(ctx, "maxmemory*").Result()
		require.NoError(t, err)
		require.Equal(t, "3145728", got["maxmemory"])
		require.Equal(t, "volatile-ttl", got["maxmemory-policy"])
	}
	check()
	s.Restart()
	check()
}
