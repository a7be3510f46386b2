package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

const (
	// failoverRecovery bounds the time from a replica's promotion to
	// decisions succeeding again on every shard.
	failoverRecovery = 2 * time.Second
	// failoverSettled is how long every stream must succeed, after its
	// last failure, before the test stops the streams.
	failoverSettled = 500 * time.Millisecond
	// failoverWatch is how long after the promotion the test watches the
	// streams at most: past failoverRecovery, to show how late they are.
	failoverWatch = failoverRecovery + time.Second
	// streamEvery paces each stream of decisions.
	streamEvery = 10 * time.Millisecond
	// takeTimeout bounds each decision of a stream, direct (Store.Take) or
	// through the Limiter (its timeout): short beside failoverRecovery, so
	// that a decision stuck on the dead master shows as a failure in time,
	// but long enough that a healthy decision on a busy machine never
	// times out (a sample before the kill must succeed).
	takeTimeout = time.Second
)

// sample is one decision of a stream.
type sample struct {
	start, end time.Time
	ok         bool // decided by Redis: no error, not failed open
	allowed    bool // admitted by Redis
	failedOpen bool // admitted unchecked by the Limiter's fail-open
}

// stream is a steady flow of decisions on one key, through Store.Take or
// through a core.Limiter, recorded sample by sample.
type stream struct {
	via     string
	key     string
	shard   int
	decide  func(key string) sample
	samples []sample

	oks      atomic.Int64
	lastOK   atomic.Int64 // start of the last successful decision, UnixNano
	lastFail atomic.Int64 // end of the last failed decision, UnixNano
}

// run decides, one decision every streamEvery, until stop closes or
// maxDecisions have been made.
func (st *stream) run(stop <-chan struct{}, maxDecisions int) {
	tick := time.NewTicker(streamEvery)
	defer tick.Stop()
	for range maxDecisions {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		s := st.decide(st.key)
		st.samples = append(st.samples, s)
		if s.ok {
			st.oks.Add(1)
			st.lastOK.Store(s.start.UnixNano())
		} else {
			st.lastFail.Store(s.end.UnixNano())
		}
	}
}

// settled reports whether the stream has succeeded since its last failure,
// which ended at least failoverSettled before now.
func (st *stream) settled(now time.Time) bool {
	fail := st.lastFail.Load()
	return st.lastOK.Load() > fail && now.UnixNano()-fail >= int64(failoverSettled)
}

// recoveredAt returns the start of the first decision after kill from
// which on every decision succeeded, and whether the stream failed at all
// after kill.
func (st *stream) recoveredAt(kill time.Time) (time.Time, bool) {
	at, failed := kill, false
	for i, s := range st.samples {
		if s.start.Before(kill) || s.ok {
			continue
		}
		failed = true
		at = time.Time{}
		if i+1 < len(st.samples) {
			at = st.samples[i+1].start
		}
	}
	return at, failed
}

// TestClusterFailover kills the master of one shard of a Redis Cluster of
// three masters and three replicas, under a steady stream of decisions on
// every shard through Store.Take and through a core.Limiter, with a
// go-redis cluster client of default options. Decisions on every shard
// must succeed again within failoverRecovery of the replica's promotion
// (go-redis alone would keep sending them to the dead master until its
// next periodic reload, 60 s later), and the limits must still hold: the
// quota spent before the kill, once replicated, is still spent after it.
//
// Redis replicates asynchronously: a write acknowledged by a master in the
// instant before it dies may never reach its replica, and a client would
// then get that quota again. The test rules that out (every key's writes
// are replicated before the kill, and the streams only meet exhausted
// keys, whose denials write nothing), so what it asserts is guaranteed:
// every replicated admission survives the failover.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartReplicatedCluster(t)
	client := c.Client()
	s := mustNew(t, client, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	const limit = 5
	p := core.Policy{Name: "failover", Algorithm: core.SlidingWindowLog, Limit: limit, Window: time.Hour}
	// Default options, fail open, but for the timeout (takeTimeout).
	lim, err := core.NewLimiter(within(s, takeTimeout), []core.Policy{p})
	require.NoError(t, err)

	shards := c.Shards()
	require.Len(t, shards, 3)
	victim := 0
	keys := keysPerShard(t, ctx, client, s, p, shards, "take", "limiter", "quota")

	// Spend every stream key's whole quota and two units of each quota
	// key's, and make sure the victim's replica has it all.
	for sh := range shards {
		for _, k := range []string{keys[sh]["take"], keys[sh]["limiter"]} {
			for i := range limit + 1 {
				d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: k, Policy: p, Cost: 1})
				require.NoError(t, err)
				require.Equal(t, i < limit, d.Allowed, "%s request %d", k, i)
			}
		}
		for range 2 {
			d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: keys[sh]["quota"], Policy: p, Cost: 1})
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
	}
	c.WaitReplicated(shards[victim])

	take := func(key string) sample {
		ctx, cancel := context.WithTimeout(ctx, takeTimeout)
		defer cancel()
		smp := sample{start: time.Now()}
		d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: key, Policy: p, Cost: 1})
		smp.end, smp.ok, smp.allowed = time.Now(), err == nil, err == nil && d.Allowed
		return smp
	}
	allow := func(key string) sample {
		smp := sample{start: time.Now()}
		d, err := lim.AllowN(ctx, key, 1, time.Time{})
		smp.end = time.Now()
		smp.ok = err == nil && d.Source != core.SourceFailMode
		smp.allowed = smp.ok && d.Allowed
		smp.failedOpen = d.Allowed && d.Source == core.SourceFailMode
		return smp
	}
	var streams []*stream
	for sh := range shards {
		streams = append(streams,
			&stream{via: "Store.Take", key: keys[sh]["take"], shard: sh, decide: take},
			&stream{via: "Limiter.AllowN", key: keys[sh]["limiter"], shard: sh, decide: allow})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, st := range streams {
		// At most 30 s of decisions, whatever happens.
		wg.Go(func() { st.run(stop, int(30*time.Second/streamEvery)) })
	}
	stopped := false
	stopStreams := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopStreams()

	// Every stream decides through Redis before the kill.
	waitFor(t, 5*time.Second, "every stream succeeding before the kill", func() bool {
		for _, st := range streams {
			if st.oks.Load() < 10 {
				return false
			}
		}
		return true
	})

	killed := time.Now()
	shards[victim].Master.Kill()
	promoted, at := c.WaitPromoted(shards[victim])
	t.Logf("replica %s promoted %v after its master was killed", promoted.Addr(), at.Sub(killed).Round(time.Millisecond))

	// Watch until every stream has settled, or failoverWatch.
	for now := time.Now(); now.Sub(at) < failoverWatch; now = time.Now() {
		settled := true
		for _, st := range streams {
			settled = settled && st.settled(now)
		}
		if settled {
			break
		}
		time.Sleep(streamEvery)
	}
	stopStreams()

	unchecked := 0
	for _, st := range streams {
		name := fmt.Sprintf("%s on shard %d (%s)", st.via, st.shard, st.key)
		for _, smp := range st.samples {
			if smp.end.Before(killed) {
				assert.True(t, smp.ok, "%s failed before the kill", name)
			}
			assert.False(t, smp.allowed, "%s: Redis admitted a request beyond the limit", name)
			if smp.failedOpen {
				unchecked++
			}
		}
		rec, failed := st.recoveredAt(killed)
		if st.shard == victim {
			assert.True(t, failed, "%s never failed: the kill did not reach it", name)
		}
		if !failed {
			t.Logf("%s: %d decisions, no failure", name, len(st.samples))
			continue
		}
		if rec.IsZero() {
			t.Errorf("%s: still failing %v after the promotion", name, failoverWatch)
			continue
		}
		t.Logf("%s: %d decisions, succeeding again %v after the promotion", name, len(st.samples), rec.Sub(at).Round(time.Millisecond))
		assert.LessOrEqual(t, rec.Sub(at), failoverRecovery, "%s: recovery after the promotion", name)
	}
	t.Logf("%d requests failed open, unchecked", unchecked)

	// The quota spent before the failover is still spent: 3 more of each
	// quota key's 5, wherever its shard's master is now.
	for sh := range shards {
		admitted := 0
		for range limit + 3 {
			d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: keys[sh]["quota"], Policy: p, Cost: 1})
			require.NoError(t, err, "shard %d after the failover", sh)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, limit-2, admitted, "quota key of shard %d after the failover", sh)
	}
}

// keysPerShard returns, for each shard, one client key per name whose
// state lives on that shard.
func keysPerShard(t *testing.T, ctx context.Context, client *redis.ClusterClient, s *Store, p core.Policy,
	shards []redistest.Shard, names ...string) []map[string]string {
	t.Helper()
	keys := make([]map[string]string, len(shards))
	for i := range keys {
		keys[i] = map[string]string{}
	}
	for _, name := range names {
		found := 0
		for i := 0; found < len(shards); i++ {
			require.Less(t, i, 1000, "no key %s-... on every shard", name)
			k := fmt.Sprintf("%s-%d", name, i)
			slot, err := client.ClusterKeySlot(ctx, s.stateKey(k, p)).Result()
			require.NoError(t, err)
			for sh, shard := range shards {
				if _, ok := keys[sh][name]; !ok && shard.Has(int(slot)) {
					keys[sh][name] = k
					found++
				}
			}
		}
	}
	return keys
}

// waitFor polls cond until it holds, failing the test after limit
// (scaled by testwait).
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, limit, 10*time.Millisecond, cond, "no %s", what)
}
