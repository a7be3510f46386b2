package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

const (
	// shardPacers offer decisions, each one every shardEvery, each
	// decision on a goroutine of its own (at most shardInFlight of a
	// pacer's at once: an app server's requests do not wait for each
	// other): 2,000 decisions a second in all, 500 under the race
	// detector.
	shardPacers   = 8
	shardEvery    = raceSlowdown * 4 * time.Millisecond
	shardInFlight = 64
	shardKeys     = 1000
	// shardMaxEach bounds each pacer's decisions: 40 s of them.
	shardMaxEach = int(40 * time.Second / shardEvery)
	// shardHealthy is the least share of the healthy shards' decisions,
	// in every second after the kill, that Redis must make.
	shardHealthy = 0.9
	// shardMinPerSecond is the least decisions a second must hold on the
	// healthy shards to be judged (the last one may be cut short).
	shardMinPerSecond = 50
)

// shardSample is one decision of TestClusterDeadShardCostsOnlyItsKeys.
type shardSample struct {
	start  time.Time
	victim bool // the key is on the killed master's shard
	d      core.Decision
}

// TestClusterDeadShardCostsOnlyItsKeys kills (SIGKILL) one master of a
// Redis Cluster of three masters and three replicas, under paced load
// over 1,000 keys in every slot range, through two Limiters of default
// options (fail open; the timeout aside), a token bucket and a sliding
// log. The dead master's keys fail open until its replica is promoted;
// the keys on the two healthy masters must keep deciding through Redis,
// at least 90% of their decisions in every second after the kill. With
// one circuit breaker per Limiter, three failures on the dead shard
// opened it for every key, and the healthy shards failed open too until
// the promotion. The cluster runs with cluster-require-full-coverage no,
// as a cluster must for its healthy masters to serve while one is down:
// without it, Redis itself answers CLUSTERDOWN for every key, on every
// master, from the moment the cluster marks the dead master failed to
// the promotion of its replica (see docs/redis.md).
func TestClusterDeadShardCostsOnlyItsKeys(t *testing.T) {
	c := redistest.StartReplicatedCluster(t, "--cluster-require-full-coverage", "no")
	client := c.Client()
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	policies := []core.Policy{
		{Name: "tb", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second},
		{Name: "log", Algorithm: core.SlidingWindowLog, Limit: 1000, Window: time.Minute},
	}
	var lims []*core.Limiter
	for _, p := range policies {
		// Default options, fail open, but for the timeout (takeTimeout:
		// a healthy decision on a busy machine must not time out).
		l, err := core.NewLimiter(within(s, testwait.D(takeTimeout)), []core.Policy{p})
		require.NoError(t, err)
		lims = append(lims, l)
	}

	shards := c.Shards()
	require.Len(t, shards, 3)
	const victim = 0
	keys := make([]string, shardKeys)
	onVictim := make([]bool, shardKeys)
	perShard := make([]int, len(shards))
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
		sl := int(slot(keys[i]))
		for sh := range shards {
			if shards[sh].Has(sl) {
				perShard[sh]++
				onVictim[i] = sh == victim
			}
		}
	}
	for sh, n := range perShard {
		require.Greater(t, n, shardKeys/5, "keys on shard %d", sh)
	}

	samples := make([][]shardSample, shardPacers) // each pacer's
	var mu [shardPacers]sync.Mutex
	var victimStore atomic.Int64 // start of the last victim decision Redis made, UnixNano
	var issued atomic.Int64
	stop := make(chan struct{})
	var pacers, decisions sync.WaitGroup
	for w := range shardPacers {
		pacers.Go(func() {
			tick := time.NewTicker(shardEvery)
			defer tick.Stop()
			slots := make(chan struct{}, shardInFlight)
			for i := w; i < shardMaxEach*shardPacers; i += shardPacers {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				select {
				case slots <- struct{}{}:
				default:
					continue // as many in flight as it may have: offered, not made
				}
				issued.Add(1)
				decisions.Go(func() {
					defer func() { <-slots }()
					k := i % shardKeys
					start := time.Now()
					d, err := lims[i/shardKeys%len(lims)].AllowN(ctx, keys[k], 1, time.Time{})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Source == core.SourceStore && onVictim[k] {
						victimStore.Store(start.UnixNano())
					}
					mu[w].Lock()
					samples[w] = append(samples[w], shardSample{start: start, victim: onVictim[k], d: d})
					mu[w].Unlock()
				})
			}
		})
	}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			pacers.Wait()
			decisions.Wait()
		}
	}
	defer stopLoad()

	// A second of load, then the kill (the load's length, not a wait on
	// anything but the decisions it counts).
	loadStart := time.Now()
	testwait.For(t, 10*time.Second, 10*time.Millisecond, func() bool {
		return time.Since(loadStart) >= time.Second && issued.Load() >= int64(shardPacers)*int64(time.Second/shardEvery)/2
	}, "a second of load before the kill")
	killed := time.Now()
	shards[victim].Master.Kill()
	promoted, at := c.WaitPromoted(shards[victim])
	t.Logf("replica %s promoted %v after its master was killed", promoted.Addr(), at.Sub(killed).Round(time.Millisecond))
	testwait.For(t, failoverRecovery, 10*time.Millisecond, func() bool {
		return victimStore.Load() > at.UnixNano()
	}, "the victim's keys decided by Redis after the promotion")
	// One more second of load after the victim's recovery.
	recovered := time.Now()
	testwait.For(t, 2*time.Second, 10*time.Millisecond, func() bool {
		return time.Since(recovered) >= time.Second
	}, "a second of load after the recovery")
	stopLoad()

	// Per second from the kill (-1: the second before it): decisions on
	// the healthy shards [0] and the victim's [1], through Redis, failed
	// open, otherwise.
	type counts struct{ store, failedOpen, other [2]int }
	last := int(time.Since(killed) / time.Second)
	perSecond := make([]counts, last+2)
	var clusterDown, circuitOpen int
	var firstHealthyErr string
	for _, ss := range samples {
		for _, smp := range ss {
			sec := int(smp.start.Sub(killed).Truncate(time.Second) / time.Second)
			if smp.start.Before(killed) {
				sec = -1
				if killed.Sub(smp.start) > time.Second {
					continue
				}
			}
			if sec > last {
				continue
			}
			n, v := &perSecond[sec+1], 0
			if smp.victim {
				v = 1
			}
			switch d := &smp.d; {
			case d.Source == core.SourceStore:
				n.store[v]++
			case d.Source == core.SourceFailMode && d.Allowed:
				n.failedOpen[v]++
				if v == 0 && !smp.start.Before(killed) {
					if firstHealthyErr == "" {
						firstHealthyErr = fmt.Sprintf("at %v: %v", smp.start.Sub(killed).Round(time.Millisecond), d.Err)
					}
					if strings.Contains(d.Err.Error(), "CLUSTERDOWN") {
						clusterDown++
					} else if strings.Contains(d.Err.Error(), "circuit") {
						circuitOpen++
					}
				}
			default:
				n.other[v]++
			}
		}
	}
	var table strings.Builder
	table.WriteString("second | healthy: store  failed-open  other | victim: store  failed-open  other\n")
	for i, n := range perSecond {
		fmt.Fprintf(&table, "%6d | %14d %12d %6d | %13d %12d %6d\n", i-1,
			n.store[0], n.failedOpen[0], n.other[0], n.store[1], n.failedOpen[1], n.other[1])
	}
	t.Logf("decisions per second from the kill (-1: the second before it; %d offered a second), the promotion at %.2f s:\n%s",
		int(time.Second/shardEvery)*shardPacers, at.Sub(killed).Seconds(), table.String())
	if firstHealthyErr != "" {
		t.Logf("first decision on a healthy shard that failed open after the kill, %s; %d with CLUSTERDOWN, %d with the breaker open",
			firstHealthyErr, clusterDown, circuitOpen)
	}

	victimFailed := 0
	for i, n := range perSecond {
		victimFailed += n.failedOpen[1]
		healthy := n.store[0] + n.failedOpen[0] + n.other[0]
		if healthy < shardMinPerSecond {
			continue
		}
		share := float64(n.store[0]) / float64(healthy)
		assert.GreaterOrEqual(t, share, shardHealthy, "second %d: the healthy shards' share of decisions through Redis (%d of %d)",
			i-1, n.store[0], healthy)
	}
	assert.Positive(t, victimFailed, "no decision on the victim's shard failed open: the kill did not reach it")
}

// TestClusterPartitions: over a cluster client, the Store names each key's
// partition by its master's address, as go-redis routes it; a Take over
// two masters, one of them dead, fails, and sets the Err of the request
// on the dead one alone (naming that master); and a layered Limiter opens the dead master's
// breaker alone, so that layered requests and single ones on the live
// masters go on through Redis. Over a *redis.Client the Store is one
// partition.
func TestClusterPartitions(t *testing.T) {
	one := mustNew(t, redistest.Start(t).Client(), WithPrefix(testPrefix(t)))
	assert.Nil(t, one.Partitioner(), "one Redis is one partition")

	c := redistest.StartCluster(t, "--cluster-require-full-coverage", "no")
	client := c.Client()
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	name := s.Partitioner()
	require.NotNil(t, name)
	testwait.For(t, 5*time.Second, 10*time.Millisecond, func() bool { return name("k") != "" },
		"the slot map loaded (until then, every key is in partition \"\")")
	byName := map[string]string{} // a key per master
	for i := 0; len(byName) < 3; i++ {
		require.Less(t, i, 1000, "no key on every master")
		k := fmt.Sprintf("k-%d", i)
		m, err := client.MasterForKey(ctx, k)
		require.NoError(t, err)
		require.Equal(t, m.Options().Addr, name(k), "%s: the master go-redis sends it to", k)
		if _, ok := byName[name(k)]; !ok {
			byName[name(k)] = k
		}
	}
	var dead *redistest.Server
	var live []string
	for _, n := range c.Nodes() {
		if dead == nil {
			dead = n
			continue
		}
		live = append(live, byName[n.Addr()])
	}
	deadKey := byName[dead.Addr()]
	require.NotEmpty(t, deadKey)
	require.Len(t, live, 2)
	require.NotContains(t, live, "")

	layers := []core.Policy{
		{Name: "user", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second},
		{Name: "all", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Second},
	}
	l, err := core.NewLimiter(within(s, testwait.D(takeTimeout)), layers)
	require.NoError(t, err)
	spread := []core.Request{{Key: deadKey, Cost: 1}, {Key: live[0], Cost: 1}}
	healthy := []core.Request{{Key: live[0], Cost: 1}, {Key: live[1], Cost: 1}}
	d, _, err := l.AllowLayers(ctx, time.Time{}, spread, nil)
	require.NoError(t, err)
	require.Equal(t, core.SourceStore, d.Source, "before the kill: %v", d.Err)

	dead.Kill()
	reqs := []core.Request{{Key: deadKey, Policy: layers[0], Cost: 1}, {Key: live[0], Policy: layers[1], Cost: 1}}
	out := make([]core.Decision, 2)
	_, err = takeN(s, ctx, time.Time{}, reqs, out)
	require.Error(t, err)
	require.Error(t, out[0].Err, "the request on the dead master")
	assert.Contains(t, out[0].Err.Error(), dead.Addr())
	assert.ErrorIs(t, err, out[0].Err)
	assert.NoError(t, out[1].Err, "the request on a live master")

	// The spread requests fail; after three, the dead master's breaker
	// is open, and only requests that need it fail over.
	for i := 0; ; i++ {
		require.Less(t, i, 10, "the dead master's breaker never opened")
		d, _, err = l.AllowLayers(ctx, time.Time{}, spread, nil)
		require.NoError(t, err)
		require.Equal(t, core.SourceFailMode, d.Source)
		if errors.Is(d.Err, limits.ErrCircuitOpen) {
			break
		}
	}
	d, _, err = l.AllowLayers(ctx, time.Time{}, healthy, nil)
	require.NoError(t, err)
	assert.Equal(t, core.SourceStore, d.Source, "a layered request on the live masters: %v", d.Err)
	d, err = l.AllowN(ctx, live[1], 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, core.SourceStore, d.Source, "a request on a live master: %v", d.Err)
	d, err = l.AllowN(ctx, deadKey, 1, time.Time{})
	require.NoError(t, err)
	assert.ErrorIs(t, d.Err, limits.ErrCircuitOpen, "a request on the dead master")
	assert.Equal(t, core.Failing, l.Health())
}
