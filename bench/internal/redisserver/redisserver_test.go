package redisserver

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartAndClose(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("CI") != "true" {
		t.Skip(ErrNotInstalled)
	}
	t.Setenv("REDIS_URL", "")
	ctx := context.Background()
	s, err := Start(ctx)
	require.NoError(t, err)
	require.True(t, s.Owned)
	c := s.NewClient()
	defer c.Close()
	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, s.Close())
	require.Error(t, c.Ping(ctx).Err(), "the server still answers after Close")
	require.NoDirExists(t, s.dir)
	require.NoError(t, s.Close(), "a second Close")
}

func TestStartRedisURL(t *testing.T) {
	t.Setenv("REDIS_URL", "not a url")
	_, err := Start(context.Background())
	require.ErrorContains(t, err, "REDIS_URL")

	// A URL that parses but where nothing listens: port 1 on loopback.
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	_, err = Start(context.Background())
	require.ErrorContains(t, err, "127.0.0.1:1")
}
