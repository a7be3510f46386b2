// Package redisserver runs one redis-server for the comparison benchmarks:
// a child process bound to 127.0.0.1 on a free port, with its own temporary
// directory, nothing saved to disk, killed by Close. When REDIS_URL is set,
// Start uses that server instead and starts nothing.
//
// It is a small copy of what the main module's internal/testkit/redistest does,
// since another module cannot import that package.
package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotInstalled is returned by Start when redis-server is not on PATH
// and REDIS_URL is not set.
var ErrNotInstalled = errors.New("redisserver: redis-server not found on PATH (apt-get install redis-server), and REDIS_URL is not set")

// readyTimeout bounds the wait for a new server to answer PING.
const readyTimeout = 10 * time.Second

// startAttempts is how many free ports Start tries.
const startAttempts = 5

// Server is a Redis server: a child redis-server, or the server of
// REDIS_URL.
type Server struct {
	// Options are the go-redis options that reach the server: Addr (and,
	// from REDIS_URL, whatever else the URL says), all else at go-redis's
	// defaults.
	Options redis.Options
	// Owned reports whether Start started the server (so that it may be
	// flushed and must be closed); false for REDIS_URL's.
	Owned bool

	cmd *exec.Cmd
	dir string
}

// Start returns the server of REDIS_URL when it is set, else a new
// redis-server on a free loopback port. It returns ErrNotInstalled when
// neither is to be had.
func Start(ctx context.Context) (*Server, error) {
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("redisserver: REDIS_URL: %w", err)
		}
		s := &Server{Options: *opt}
		if err := s.ping(ctx); err != nil {
			return nil, fmt.Errorf("redisserver: REDIS_URL %s: %w", opt.Addr, err)
		}
		return s, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	var last error
	for range startAttempts {
		s, err := start(ctx, bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

// start runs one redis-server on a port that was free a moment ago.
func start(ctx context.Context, bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ratelimit-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	)
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redisserver: starting %s: %w", bin, err)
	}
	s := &Server{
		Options: redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))},
		Owned:   true,
		cmd:     cmd,
		dir:     dir,
	}
	if err := s.waitReady(ctx); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		_ = s.Close()
		return nil, fmt.Errorf("redisserver: %s did not answer PING within %s: %w\n%s", s.Options.Addr, readyTimeout, err, log)
	}
	return s, nil
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisserver: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls PING until it answers or readyTimeout passes.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// ping sends one PING over a client of its own.
func (s *Server) ping(ctx context.Context) error {
	c := s.NewClient()
	defer c.Close()
	return c.Ping(ctx).Err()
}

// NewClient returns a new go-redis client with the server's Options,
// redis.NewClient's defaults for everything else. The caller closes it.
func (s *Server) NewClient() *redis.Client {
	opt := s.Options
	return redis.NewClient(&opt)
}

// Close kills the server that Start started and removes its directory;
// it does nothing for REDIS_URL's server.
func (s *Server) Close() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
	return os.RemoveAll(s.dir)
}
