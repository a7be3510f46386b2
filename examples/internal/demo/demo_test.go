package demo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

func TestDefaultPoliciesValidate(t *testing.T) {
	p := DefaultPolicies()
	for _, q := range []core.Policy{p.Global, p.Login, p.API, p.Users} {
		if err := q.Validate(); err != nil {
			t.Errorf("%s: %v", q.Name, err)
		}
	}
}

func TestNewLimiters(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	l, err := NewLimiters(store, DefaultPolicies())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		l    *core.Limiter
		mode core.FailMode
	}{
		"global": {l.Global, core.FailOpen},
		"login":  {l.Login, core.FailClosed},
		"api":    {l.API, core.FailOpen},
		"users":  {l.Users, core.FailOpen},
	} {
		if got := tc.l.Policy().Name; got != name {
			t.Errorf("policy %q, want %q", got, name)
		}
		if got := tc.l.FailMode(); got != tc.mode {
			t.Errorf("%s: fails %v, want %v", name, got, tc.mode)
		}
	}

	k, err := l.RouteAndIP(request{route: "/users/:id"})
	if err != nil || k != "route:GET /users/:id|ip:203.0.113.7" {
		t.Errorf("RouteAndIP = %q, %v", k, err)
	}
	if _, err := l.APIKey(request{}); !errors.Is(err, keyfuncs.ErrNoKey) {
		t.Errorf("APIKey without the header: err = %v, want ErrNoKey", err)
	}
	k, err = l.APIKey(request{header: http.Header{"X-Api-Key": {"secret"}}})
	if err != nil || !strings.HasPrefix(k, "key:") || strings.Contains(k, "secret") {
		t.Errorf("APIKey = %q, %v; want a hashed key", k, err)
	}

	p := DefaultPolicies()
	p.API.Limit = 0
	if _, err := NewLimiters(store, p); !errors.Is(err, core.ErrInvalidPolicy) || !strings.Contains(err.Error(), "API limit") {
		t.Errorf("invalid API policy: err = %v, want ErrInvalidPolicy naming the API limit", err)
	}
}

// request is a keyfuncs.Request from a fixed peer on a fixed route.
type request struct {
	route  string
	header http.Header
}

func (request) RemoteAddr() string                  { return "203.0.113.7:4321" }
func (r request) Header(name string) string         { return r.header.Get(name) }
func (r request) HeaderValues(name string) []string { return r.header.Values(name) }
func (request) Query(string) string                 { return "" }
func (request) Method() string                      { return http.MethodGet }
func (r request) Route() string                     { return r.route }
func (request) Context() context.Context            { return context.Background() }

func TestDescribe(t *testing.T) {
	p := DefaultPolicies()
	for _, tc := range []struct {
		p    core.Policy
		want string
	}{
		{p.Global, "token bucket, 100 per 1m, burst 20"},
		{p.Login, "sliding window log, 5 per 15m"},
		{p.API, "sliding window counter, 1000 per 1h"},
		{core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: 90 * time.Minute}, "leaky bucket, 10 per 1h30m, burst 10"},
		{core.Policy{Algorithm: core.FixedWindow, Limit: 3, Window: 10 * time.Second}, "fixed window, 3 per 10s"},
	} {
		if got := Describe(tc.p); got != tc.want {
			t.Errorf("Describe(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestBaseURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080":      "http://127.0.0.1:8080",
		"0.0.0.0:8080":        "http://127.0.0.1:8080",
		"[::]:8080":           "http://127.0.0.1:8080",
		"[::1]:8080":          "http://[::1]:8080",
		"[::ffff:10.0.0.1]:1": "http://10.0.0.1:1",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := BaseURL(a); got != want {
			t.Errorf("BaseURL(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestWriteBanner(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	var b bytes.Buffer
	if err := WriteBanner(&b, "chi", addr, "memory", DefaultPolicies()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ratelimit demo (chi) listening on http://127.0.0.1:8080\n",
		"store: memory",
		"for i in $(seq 1 25); do curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:8080/; done",
		"wait 12s",
		"for i in $(seq 1 7); do curl -s -o /dev/null -w '%{http_code}\\n' -X POST http://127.0.0.1:8080/login; done",
		"curl -i -H 'X-API-Key: demo' http://127.0.0.1:8080/api/data",
		"curl -i http://127.0.0.1:8080/users/42",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the banner lacks %q:\n%s", want, b.String())
		}
	}
}

func TestAddr(t *testing.T) {
	t.Setenv("ADDR", "")
	if got := Addr(); got != DefaultAddr {
		t.Errorf("Addr() = %q, want %q", got, DefaultAddr)
	}
	t.Setenv("ADDR", ":9090")
	if got := Addr(); got != ":9090" {
		t.Errorf("Addr() = %q, want :9090", got)
	}
}

func TestOpenStoreMemory(t *testing.T) {
	s, err := OpenStore(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Store.(core.NonBlocking); !ok || s.Name != "memory" {
		t.Errorf("OpenStore(\"\") = %T named %q, want the memory store", s.Store, s.Name)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func TestOpenStoreBadURL(t *testing.T) {
	if _, err := OpenStore(context.Background(), "http://127.0.0.1:6379"); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("err = %v, want an error about REDIS_URL", err)
	}
}

func TestOpenStoreRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := OpenStore(ctx, "redis://"+addr+"/0"); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Errorf("err = %v, want Redis not answering", err)
	}
}

func TestOpenStoreRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := OpenStore(ctx, "redis://"+srv.Addr()+"/0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if !strings.HasPrefix(s.Name, "redis at "+srv.Addr()) {
		t.Errorf("Name = %q, want redis at %s", s.Name, srv.Addr())
	}
	l, err := core.NewLimiter(s.Store, core.Policy{Name: "demo-test", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	key := "test-" + time.Now().Format(time.RFC3339Nano)
	for i, want := range []bool{true, false} {
		d, err := l.Allow(ctx, key)
		if err != nil || d.Allowed != want {
			t.Fatalf("Allow #%d = %v, %v; want %v", i+1, d.Allowed, err, want)
		}
	}
	if err := l.Reset(ctx, key); err != nil {
		t.Error(err)
	}
}

// TestRun serves a handler through run, then ends its context, as a signal
// would: run must shut the server down gracefully and return nil.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	var got Limiters
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &out, "test", "127.0.0.1:0", "", func(l Limiters) Server {
			got = l
			return HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, "ok")
			}))
		})
	}()

	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		if _, rest, ok := strings.Cut(out.String(), ListeningPrefix); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				base = line
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no banner within 10s")
		}
	}
	if got.Global == nil || got.Global.Policy() != DefaultPolicies().Global {
		t.Errorf("the server was built with %+v, want the default limiters", got)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", res.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want nil after a graceful shutdown", err)
		}
	case <-time.After(ShutdownTimeout + 5*time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if !strings.HasSuffix(out.String(), "stopped\n") {
		t.Errorf("output does not end with the stop:\n%s", out.String())
	}
}

func TestRunListenError(t *testing.T) {
	err := run(context.Background(), io.Discard, "test", "256.0.0.1:0", "", func(Limiters) Server {
		return HTTPServer(http.NotFoundHandler())
	})
	if err == nil {
		t.Error("run on a bad address succeeded")
	}
}

// syncBuffer is a bytes.Buffer that one goroutine writes while another
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
