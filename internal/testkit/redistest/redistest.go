// Package redistest runs real Redis servers for tests: one redis-server,
// a Redis Cluster of three masters, or one of three masters with a replica
// each (StartReplicatedCluster), each node a child process bound to
// 127.0.0.1 with its own temporary directory, killed when the test ends,
// whether it passed or not.
//
// When REDIS_URL is set, Start uses that server instead of starting one
// (Freeze, Thaw, Kill and Restart then skip the test). When redis-server
// (or, for a cluster, redis-cli) is missing, the test is skipped, unless
// CI=true, where it fails: CI must not pass by skipping.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// startAttempts is how many ports Start tries before giving up.
const startAttempts = 5

// Bounds on every wait, so that no test hangs on a server that misbehaves;
// deadlines, scaled by testwait.
var (
	// readyTimeout bounds the wait for a new server to answer PING.
	readyTimeout = testwait.D(10 * time.Second)
	// killTimeout bounds the wait for a killed server to exit.
	killTimeout = testwait.D(10 * time.Second)
	// clusterTimeout bounds redis-cli --cluster create and the wait for
	// cluster_state:ok on every node.
	clusterTimeout = testwait.D(30 * time.Second)
)

// Install is the hint given when a Redis binary is missing.
const Install = "apt-get install redis-server redis-tools"

// Server is one Redis server for a test: a child redis-server, or the
// server of REDIS_URL.
type Server struct {
	tb       testing.TB
	bin      string
	dir      string
	args     []string // extra arguments, after the common ones
	port     int
	external *redis.Options // the parsed REDIS_URL, or nil

	mu    sync.Mutex
	proc  *process // nil once killed
	count int      // processes started, to name their log files
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once the process has exited
}

// Start returns a Redis server for the test: the one of REDIS_URL when it
// is set, else a redis-server started on a free loopback port, stopped in
// tb.Cleanup. It skips the test when redis-server is not installed, or
// fails it under CI=true.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		opt, err := redis.ParseURL(u)
		if err != nil {
			tb.Fatalf("redistest: REDIS_URL: %v", err)
		}
		return &Server{tb: tb, external: opt}
	}
	return startLocal(tb, lookPath(tb, "redis-server"), nil, nil)
}

// startLocal starts a redis-server on a free port, retrying on other
// ports when one is taken meanwhile. extra, when not nil, returns
// arguments to add given the server's directory; pick chooses the ports,
// nil meaning any free port.
func startLocal(tb testing.TB, bin string, extra func(dir string) []string, pick func() (int, error)) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir()}
	// Registered after TempDir, so it runs before the directory goes.
	tb.Cleanup(s.stop)
	if extra != nil {
		s.args = extra(s.dir)
	}
	if pick == nil {
		pick = freePort
	}
	var err error
	for range startAttempts {
		var port int
		if port, err = pick(); err != nil {
			continue
		}
		s.port = port
		if err = s.spawn(); err == nil {
			return s
		}
	}
	tb.Fatalf("redistest: no redis-server started after %d attempts: %v", startAttempts, err)
	return nil
}

// lookPath finds a binary, or skips the test (fails it under CI=true).
func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: %s not found in PATH, and CI=true forbids skipping: %s", name, Install)
	}
	tb.Skipf("%s not found: %s", name, Install)
	return ""
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// spawn starts redis-server on s.port and waits until it answers PING. The
// caller holds no lock.
func (s *Server) spawn() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	log := filepath.Join(s.dir, fmt.Sprintf("redis-%d-%d.log", s.port, s.count))
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", log,
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := waitReady(s.addr(), p.done); err != nil {
		kill(p)
		return fmt.Errorf("redis-server on port %d: %w\n%s", s.port, err, tail(log))
	}
	s.proc = p
	return nil
}

// waitReady polls addr with PING until it answers +PONG, the process
// exits (done closes) or readyTimeout passes.
func waitReady(addr string, done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return errors.New("exited before answering PING")
		default:
		}
		if ping(addr) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v", readyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends an inline PING over a fresh connection.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(testwait.Deadline(500 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// kill sends SIGKILL to p and waits, bounded, until it has exited.
func kill(p *process) error {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("redis-server (pid %d) still running %v after SIGKILL", p.cmd.Process.Pid, killTimeout)
	}
}

// tail returns the end of a log file, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(bytes.TrimSpace(b))
}

// stop kills the process, if any; it is the Cleanup of a local Server.
func (s *Server) stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		if err := kill(p); err != nil {
			s.tb.Error("redistest: ", err)
		}
	}
}

func (s *Server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// External reports whether the server is the one of REDIS_URL, which the
// test must not freeze, kill or flush.
func (s *Server) External() bool { return s.external != nil }

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	if s.external != nil {
		return s.external.Addr
	}
	return s.addr()
}

// Port returns the server's TCP port.
func (s *Server) Port() int {
	if s.external != nil {
		_, p, _ := net.SplitHostPort(s.external.Addr)
		n, _ := strconv.Atoi(p)
		return n
	}
	return s.port
}

// Options returns new client options for the server: go-redis defaults
// plus the address (and, for REDIS_URL, whatever the URL says). The caller
// may change them and owns any client built from them.
func (s *Server) Options() *redis.Options {
	if s.external != nil {
		o := *s.external
		return &o
	}
	return &redis.Options{Addr: s.addr()}
}

// Client returns a new client for the server, built with Options, and
// closes it when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.Options())
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// local returns the running process, skipping the test when the server is
// REDIS_URL's and failing it when the server has been killed.
func (s *Server) local(what string) *process {
	s.tb.Helper()
	if s.external != nil {
		s.tb.Skipf("redistest: cannot %s the REDIS_URL server", what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.tb.Fatalf("redistest: cannot %s a killed server; Restart it first", what)
	}
	return s.proc
}

// Freeze stops the server with SIGSTOP: connections stay open, commands
// get no answer, as with a Redis stuck in a long command or a network
// partition. Thaw resumes it.
func (s *Server) Freeze() {
	s.tb.Helper()
	if err := signalStop(s.local("freeze").cmd.Process); err != nil {
		s.tb.Fatalf("redistest: freeze: %v", err)
	}
}

// Thaw resumes a server stopped by Freeze with SIGCONT.
func (s *Server) Thaw() {
	s.tb.Helper()
	if err := signalCont(s.local("thaw").cmd.Process); err != nil {
		s.tb.Fatalf("redistest: thaw: %v", err)
	}
}

// Kill kills the server with SIGKILL and waits until it has exited: its
// data is lost, its port refuses connections until Restart.
func (s *Server) Kill() {
	s.tb.Helper()
	p := s.local("kill")
	s.mu.Lock()
	s.proc = nil
	s.mu.Unlock()
	if err := kill(p); err != nil {
		s.tb.Fatal("redistest: ", err)
	}
}

// Restart starts the server again, empty, on the same port, killing it
// first if it still runs. Clients built before find it at the same
// address.
func (s *Server) Restart() {
	s.tb.Helper()
	if s.external != nil {
		s.tb.Skip("redistest: cannot restart the REDIS_URL server")
	}
	s.stop()
	var err error
	for i := range startAttempts {
		if err = s.spawn(); err == nil {
			return
		}
		time.Sleep(time.Duration(i+1) * 50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart on port %d: %v", s.port, err)
}

// Cluster is a Redis Cluster of three masters, without replicas, for a
// test.
type Cluster struct {
	tb    testing.TB
	nodes []*Server
}

// StartCluster starts three redis-server masters with cluster mode on, on
// free loopback ports, joins them with redis-cli --cluster create and waits
// until every node reports cluster_state:ok. The nodes are killed when the
// test ends. It skips the test when redis-server or redis-cli is missing,
// or fails it under CI=true. REDIS_URL plays no part. Each node also gets
// the redis-server arguments extra.
func StartCluster(tb testing.TB, extra ...string) *Cluster {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	cli := lookPath(tb, "redis-cli")
	c := &Cluster{tb: tb}
	clusterArgs := func(dir string) []string {
		return append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
		}, extra...)
	}
	for range 3 {
		// A node listens for the cluster bus on port+10000 as well.
		c.nodes = append(c.nodes, startLocal(tb, bin, clusterArgs, clusterPort))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.nodes {
		args = append(args, n.addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: %s %s: %v\n%s", cli, strings.Join(args, " "), err, out)
	}
	c.waitOK(ctx)
	return c
}

// clusterPort returns a port p such that p and p+10000 (the cluster bus)
// were free a moment ago, both below the usual ephemeral range.
func clusterPort() (int, error) {
	for range 100 {
		p := 10240 + rand.IntN(22767-10240)
		a, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

// waitOK polls CLUSTER INFO on every node until each says cluster_state:ok.
func (c *Cluster) waitOK(ctx context.Context) {
	c.tb.Helper()
	for _, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		var info string
		for {
			var err error
			info, err = cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				_ = cl.Close()
				c.tb.Fatalf("redistest: node %s not cluster_state:ok after %v: %v\n%s", n.addr(), clusterTimeout, err, info)
			case <-time.After(50 * time.Millisecond):
			}
		}
		_ = cl.Close()
	}
}

// Addrs returns the host:port of every node (of a ReplicatedCluster:
// masters and replicas), as seeds for a cluster client.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		a[i] = n.addr()
	}
	return a
}

// Nodes returns the nodes (of a ReplicatedCluster: masters and replicas,
// in start order), as Servers (Freeze, Kill ... apply to one node).
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Client returns a new cluster client, with go-redis defaults and every
// node as a seed, and closes it when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.tb.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Scripts returns how many scripts the server c reaches has run: its
// EVALSHA and EVAL calls, by INFO commandstats (the stores' round trips,
// which send one script each). It counts every client's: what a test's
// own clients sent, which no other client or poller changes, is
// CountScripts's.
func Scripts(tb testing.TB, c redis.UniversalClient) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO commandstats: %v", err)
	}
	n := int64(0)
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"evalsha", "eval"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				end := strings.IndexByte(rest, ',')
				if end < 0 {
					end = len(rest)
				}
				calls, err := strconv.ParseInt(rest[:end], 10, 64)
				if err != nil {
					tb.Fatalf("redistest: commandstats line %q: %v", line, err)
				}
				n += calls
			}
		}
	}
	return n
}
