package redisstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// logBuffer is a slog destination that tests read, safe for concurrent
// use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logger returns a logger writing to b, from level Debug.
func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitChecked waits until the check New started is done, within
// testwait.D(d).
func waitChecked(t testing.TB, s *Store, d time.Duration) {
	t.Helper()
	d = testwait.D(d)
	select {
	case <-s.checked:
	case <-time.After(d):
		t.Fatalf("the check New started still runs after %v", d)
	}
}

// TestCheckConfig starts real servers with and without maxmemory under
// several policies: New warns, once, only where Redis would refuse writes
// when full, and CheckConfig says so with ErrNoEviction.
func TestCheckConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		bad  bool
	}{
		{"maxmemory-noeviction", []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"}, true},
		{"maxmemory-volatile-ttl", []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"}, false},
		{"maxmemory-allkeys-lru", []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, false},
		{"no-maxmemory-noeviction", []string{"--maxmemory", "0", "--maxmemory-policy", "noeviction"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.StartWith(t, c.args...)
			var logs logBuffer
			s := mustNew(t, srv.Client(), WithLogger(logs.logger()))
			waitChecked(t, s, 10*time.Second)
			err := s.CheckConfig(context.Background())
			if !c.bad {
				require.NoError(t, err)
				assert.Empty(t, logs.String())
				return
			}
			require.ErrorIs(t, err, ErrNoEviction)
			assert.Contains(t, err.Error(), srv.Addr())
			assert.Contains(t, err.Error(), "67108864 bytes")
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "\n"), "one record: %s", out)
			assert.Contains(t, out, "level=WARN")
			assert.Contains(t, out, "noeviction")
			assert.Contains(t, out, srv.Addr())
		})
	}
}

// TestCheckConfigCluster: over a cluster, every master is checked, and the
// error names the one that would refuse writes.
func TestCheckConfigCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	s := mustNew(t, cl.Client(), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, s.CheckConfig(ctx))
	bad := cl.Nodes()[1]
	node := bad.Client()
	require.NoError(t, node.ConfigSet(ctx, "maxmemory", "64mb").Err())
	err := s.CheckConfig(ctx)
	require.ErrorIs(t, err, ErrNoEviction)
	assert.Contains(t, err.Error(), bad.Addr())
	for _, n := range []*redistest.Server{cl.Nodes()[0], cl.Nodes()[2]} {
		assert.NotContains(t, err.Error(), n.Addr())
	}
	require.NoError(t, node.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	require.NoError(t, s.CheckConfig(ctx))
}

// TestCheckConfigBounded: against a frozen or a dead server, New returns
// before its check is done, the check ends within its bound whatever the
// client's options, and nothing is logged above Debug; CheckConfig fails
// without ErrNoEviction.
func TestCheckConfigBounded(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.StartWith(t, "--maxmemory", "64mb") // noeviction: would warn
			opts := srv.Options()
			opts.ContextTimeoutEnabled = kind.contextDeadline
			opts.ReadTimeout = 300 * time.Millisecond // what bounds a client without context deadlines
			client := redis.NewClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			require.NoError(t, client.Ping(context.Background()).Err()) // a connection in the pool

			srv.Freeze()
			t.Cleanup(srv.Thaw)
			var logs logBuffer
			s := mustNew(t, client, WithLogger(logs.logger()), withCheckTimeout(bound))
			select {
			case <-s.checked:
				t.Fatal("the check ended at once against a frozen server")
			default:
			}
			waitChecked(t, s, 5*time.Second)
			assert.NotContains(t, logs.String(), "level=WARN")
			assert.Contains(t, logs.String(), "level=DEBUG")

			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			err := s.CheckConfig(ctx)
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrNoEviction)
		})
	}
	t.Run("dead", func(t *testing.T) {
		srv := redistest.StartWith(t)
		client := srv.Client()
		srv.Kill()
		var logs logBuffer
		s := mustNew(t, client, WithLogger(logs.logger()), withCheckTimeout(bound))
		waitChecked(t, s, 5*time.Second)
		assert.NotContains(t, logs.String(), "level=WARN")
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		require.Error(t, s.CheckConfig(ctx))
	})
}
