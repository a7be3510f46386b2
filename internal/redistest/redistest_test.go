package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	c := s.Client()
	if err := c.Set(ctx, "redistest:k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if s.External() {
		t.Skip("REDIS_URL is set: freeze, kill and restart are for local servers only")
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 6379 {
		t.Fatalf("Addr = %s, want a loopback address off 6379", s.Addr())
	}

	s.Freeze()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	fast := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer fast.Close()
	if err := fast.Ping(short).Err(); err == nil {
		t.Fatal("PING answered while frozen")
	}
	cancel()
	s.Thaw()
	if err := c.Get(ctx, "redistest:none").Err(); err != redis.Nil {
		t.Fatalf("GET after thaw: %v, want redis.Nil", err)
	}

	port := s.Port()
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if s.Port() != port {
		t.Fatalf("restarted on port %d, want %d", s.Port(), port)
	}
	// A restart loses the data; the old client reconnects by itself.
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = c.Get(ctx, "redistest:k").Err(); err == redis.Nil {
			return
		}
	}
	t.Fatalf("GET after restart: %v, want redis.Nil", err)
}

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	ctx := context.Background()
	cl := c.Client()
	masters := map[string]bool{}
	for i := range 50 {
		k := fmt.Sprintf("redistest:%d", i)
		if err := cl.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		n, err := cl.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("50 keys landed on %d masters, want 3", len(masters))
	}
}

// TestPortTaken: a port taken between picking and binding costs a retry on
// another port, not a failure.
func TestPortTaken(t *testing.T) {
	bin := lookPath(t, "redis-server")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
	if picks != 2 || s.Port() == busy {
		t.Fatalf("started on port %d after %d picks; port %d was taken", s.Port(), picks, busy)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatal(err)
	}
}
