package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// FailoverNodeTimeout is the cluster-node-timeout of a ReplicatedCluster:
// a master silent this long is suspected, and its replica takes over a
// second or two later (Redis adds 500 to 1000 ms of election delay).
const FailoverNodeTimeout = time.Second

// failoverTimeout bounds the wait for a replica to take over.
var failoverTimeout = testwait.D(20 * time.Second)

// ReplicatedCluster is a Redis Cluster of three masters, each with one
// replica, for failover tests: kill a master, and its replica takes over
// its slots after about two seconds.
type ReplicatedCluster struct {
	Cluster // every node, masters and replicas, in start order

	mu      sync.Mutex
	clients map[*Server]*redis.Client // one per node, for the helpers' own commands
}

// Shard is a slot range's master and replicas, as the cluster reports
// them.
type Shard struct {
	Master   *Server
	Replicas []*Server
	// Slots are the master's slot ranges, first and last slot included.
	Slots [][2]int
}

// Has reports whether slot is one of the shard's.
func (s Shard) Has(slot int) bool {
	for _, r := range s.Slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// StartReplicatedCluster starts six redis-server nodes with cluster mode on
// and a cluster-node-timeout of FailoverNodeTimeout, on free loopback ports,
// joins them with redis-cli --cluster create --cluster-replicas 1, and waits
// until every node reports cluster_state:ok and every replica is in sync
// with its master. The nodes are killed when the test ends. It skips the
// test when redis-server or redis-cli is missing, or fails it under
// CI=true. REDIS_URL plays no part. Each node also gets the redis-server
// arguments extra (such as "--cluster-require-full-coverage", "no").
func StartReplicatedCluster(tb testing.TB, extra ...string) *ReplicatedCluster {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	cli := lookPath(tb, "redis-cli")
	c := &ReplicatedCluster{Cluster: Cluster{tb: tb}}
	args := func(dir string) []string {
		return append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.Itoa(int(FailoverNodeTimeout.Milliseconds())),
			// A replica's first sync starts at once, not 5 s later.
			"--repl-diskless-sync-delay", "0",
		}, extra...)
	}
	for range 6 {
		c.nodes = append(c.nodes, startLocal(tb, bin, args, clusterPort))
	}
	create := []string{"--cluster", "create"}
	create = append(create, c.Addrs()...)
	create = append(create, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: %s %s: %v\n%s", cli, strings.Join(create, " "), err, out)
	}
	c.waitOK(ctx)
	c.waitSynced(ctx)
	return c
}

// waitSynced polls until every node sees three shards of one master and
// one replica covering every slot, and every replica's link to its master
// is up: only then can a replica take over.
func (c *ReplicatedCluster) waitSynced(ctx context.Context) {
	c.tb.Helper()
	var err error
	for {
		if err = c.synced(ctx); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			c.tb.Fatalf("redistest: replicated cluster not in sync after %v: %v", clusterTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// synced reports why the cluster is not yet ready for a failover, or nil.
func (c *ReplicatedCluster) synced(ctx context.Context) error {
	for _, n := range c.nodes {
		shards, err := c.shardsFrom(ctx, n)
		if err != nil {
			return err
		}
		covered := 0
		for _, s := range shards {
			if len(s.Replicas) != 1 {
				return fmt.Errorf("node %s sees master %s with %d replicas", n.addr(), s.Master.addr(), len(s.Replicas))
			}
			for _, r := range s.Slots {
				covered += r[1] - r[0] + 1
			}
		}
		if len(shards) != 3 || covered != 16384 {
			return fmt.Errorf("node %s sees %d shards covering %d slots", n.addr(), len(shards), covered)
		}
		if isReplica(shards, n) {
			info, err := c.command(ctx, n, "info", "replication")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "master_link_status:up") {
				return fmt.Errorf("replica %s: link to its master not up", n.addr())
			}
		}
	}
	return nil
}

// isReplica reports whether n is a replica in shards.
func isReplica(shards []Shard, n *Server) bool {
	for _, s := range shards {
		if slices.Contains(s.Replicas, n) {
			return true
		}
	}
	return false
}

// Shards returns the shards as the first node that answers sees them.
func (c *ReplicatedCluster) Shards() []Shard {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(5*time.Second))
	defer cancel()
	var err error
	for _, n := range c.nodes {
		var shards []Shard
		if shards, err = c.shardsFrom(ctx, n); err == nil {
			return shards
		}
	}
	c.tb.Fatalf("redistest: no node answers CLUSTER NODES: %v", err)
	return nil
}

// Slot returns the Cluster slot of key, as the first node that answers
// computes it.
func (c *ReplicatedCluster) Slot(key string) int {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(5*time.Second))
	defer cancel()
	var err error
	for _, n := range c.nodes {
		var slot int64
		if slot, err = c.client(n).ClusterKeySlot(ctx, key).Result(); err == nil {
			return int(slot)
		}
	}
	c.tb.Fatalf("redistest: no node answers CLUSTER KEYSLOT: %v", err)
	return 0
}

// ShardOf returns the shard holding key.
func (c *ReplicatedCluster) ShardOf(key string) Shard {
	c.tb.Helper()
	slot := c.Slot(key)
	for _, s := range c.Shards() {
		if s.Has(slot) {
			return s
		}
	}
	c.tb.Fatalf("redistest: no master serves slot %d of %q", slot, key)
	return Shard{}
}

// WaitPromoted waits until a replica of s reports itself master of every
// slot of s, and returns it with the moment it was first seen so (at most
// about 10 ms after the promotion). It fails the test after 20 s.
func (c *ReplicatedCluster) WaitPromoted(s Shard) (*Server, time.Time) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	var err error
	for {
		for _, r := range s.Replicas {
			var shards []Shard
			if shards, err = c.shardsFrom(ctx, r); err != nil {
				continue
			}
			for _, ns := range shards {
				if ns.Master == r && covers(ns.Slots, s.Slots) {
					return r, time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			c.tb.Fatalf("redistest: no replica of %s promoted after %v (last error: %v)", s.Master.addr(), failoverTimeout, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// covers reports whether every slot of want is in have.
func covers(have, want [][2]int) bool {
	for _, w := range want {
		for slot := w[0]; slot <= w[1]; slot++ {
			if !(Shard{Slots: have}).Has(slot) {
				return false
			}
		}
	}
	return true
}

// shardsFrom returns the shards as node n sees them: masters not marked
// failed, with their slots and their replicas not marked failed.
func (c *ReplicatedCluster) shardsFrom(ctx context.Context, n *Server) ([]Shard, error) {
	out, err := c.command(ctx, n, "cluster", "nodes")
	if err != nil {
		return nil, err
	}
	byPort := map[int]*Server{}
	for _, s := range c.nodes {
		byPort[s.port] = s
	}
	type line struct {
		id, master string
		srv        *Server
		isMaster   bool
		slots      [][2]int
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
		// <pong-recv> <config-epoch> <link-state> <slot> <slot> ...
		f := strings.Fields(l)
		if len(f) < 8 {
			return nil, fmt.Errorf("node %s: CLUSTER NODES line %q", n.addr(), l)
		}
		flags := "," + f[2] + ","
		if strings.Contains(flags, ",fail,") || strings.Contains(flags, ",fail?,") || strings.Contains(flags, ",noaddr,") {
			continue
		}
		hostPort, _, _ := strings.Cut(f[1], "@")
		_, port, err := net.SplitHostPort(hostPort)
		if err != nil {
			return nil, fmt.Errorf("node %s: CLUSTER NODES address %q: %w", n.addr(), f[1], err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("node %s: CLUSTER NODES address %q: %w", n.addr(), f[1], err)
		}
		srv := byPort[p]
		if srv == nil {
			return nil, fmt.Errorf("node %s: CLUSTER NODES names unknown port %d", n.addr(), p)
		}
		ln := line{id: f[0], master: f[3], srv: srv, isMaster: strings.Contains(flags, ",master,")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("node %s: CLUSTER NODES slots %q: %w", n.addr(), r, err)
			}
			ln.slots = append(ln.slots, [2]int{a, b})
		}
		lines = append(lines, ln)
	}
	var shards []Shard
	for _, m := range lines {
		if !m.isMaster || len(m.slots) == 0 {
			continue
		}
		s := Shard{Master: m.srv, Slots: m.slots}
		for _, r := range lines {
			if !r.isMaster && r.master == m.id {
				s.Replicas = append(s.Replicas, r.srv)
			}
		}
		shards = append(shards, s)
	}
	return shards, nil
}

// client returns the client of one node, made on first use and closed
// when the test ends: it fails fast, without retries, within a second.
func (c *ReplicatedCluster) client(n *Server) *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[n]; ok {
		return cl
	}
	cl := redis.NewClient(&redis.Options{
		Addr: n.addr(), MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	if c.clients == nil {
		c.clients = map[*Server]*redis.Client{}
		c.tb.Cleanup(c.closeClients)
	}
	c.clients[n] = cl
	return cl
}

func (c *ReplicatedCluster) closeClients() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	c.clients = nil
}

// command runs one command on node n and returns its text reply.
func (c *ReplicatedCluster) command(ctx context.Context, n *Server, args ...any) (string, error) {
	s, err := c.client(n).Do(ctx, args...).Text()
	if err != nil {
		return "", fmt.Errorf("node %s: %v: %w", n.addr(), args, err)
	}
	return s, nil
}

// WaitReplicated waits until every replica of s has processed every write
// its master had accepted when WaitReplicated was called, so that those
// writes survive the master's death. It fails the test after
// testwait.D(10 s).
func (c *ReplicatedCluster) WaitReplicated(s Shard) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	target, err := c.replOffset(ctx, s.Master, "master_repl_offset")
	if err != nil {
		c.tb.Fatal("redistest: ", err)
	}
	for _, r := range s.Replicas {
		for {
			var got int64
			if got, err = c.replOffset(ctx, r, "slave_repl_offset"); err == nil && got >= target {
				break
			}
			select {
			case <-ctx.Done():
				c.tb.Fatalf("redistest: replica %s not at offset %d of %s: %v", r.addr(), target, s.Master.addr(), err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// replOffset reads one offset field of INFO replication on node n.
func (c *ReplicatedCluster) replOffset(ctx context.Context, n *Server, field string) (int64, error) {
	info, err := c.command(ctx, n, "info", "replication")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("node %s: no %s in INFO replication", n.addr(), field)
}
