package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
)

// reloadEvery is the least time between two requests to reload the
// cluster's slot map: a failing shard costs Redis at most a few CLUSTER
// SLOTS a second, however many decisions fail.
const reloadEvery = 200 * time.Millisecond

// stateReloader is a client that keeps a map of the cluster's slots and can
// be told to reload it: a *redis.ClusterClient, however it was built
// (NewClusterClient, NewUniversalClient with several addresses,
// NewFailoverClusterClient), or a wrapper that exposes ReloadState.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// clusterRecovery asks a cluster client to reload its slot map when a
// decision fails in a way that says a node is gone or no longer serves
// the slot.
//
// go-redis reloads its slot map on MOVED and READONLY replies, and
// otherwise only every ClusterStateReloadInterval (60 s by default). When
// a master dies, its replica takes over its slots a few seconds later, but
// nothing tells the client: the dead address refuses connections, no node
// answers MOVED, and every decision on that shard fails for up to a
// minute. A reload after each such failure, at most one per reloadEvery,
// finds the new master within that period of its promotion.
//
// The zero value, and a nil *clusterRecovery, do nothing.
type clusterRecovery struct {
	client stateReloader
	last   atomic.Int64 // time.Now().UnixNano() of the last request
}

// newClusterRecovery returns the recovery of client, or nil when client
// keeps no slot map (a *redis.Client, including a Sentinel failover client,
// which asks the Sentinels for the master at every new connection and drops
// its connections to a demoted master by itself).
func newClusterRecovery(client redis.UniversalClient) *clusterRecovery {
	if c, ok := client.(stateReloader); ok {
		return &clusterRecovery{client: c}
	}
	return nil
}

// failed is called with the error of every failed call to Redis. When the
// error says a node failed, and no reload was asked for in the last
// reloadEvery, it asks the client to reload its slot map. It never waits:
// go-redis's ReloadState (v9.22, v9.23) only starts a reload on a goroutine
// of its own, or notes that one is due when a reload is running.
func (r *clusterRecovery) failed(err error) {
	if r == nil {
		return
	}
	// The clock first: most failures of an outage come within reloadEvery
	// of a reload and need no more.
	now := time.Now().UnixNano()
	last := r.last.Load()
	if now-last < int64(reloadEvery) || !nodeFailure(err) || !r.last.CompareAndSwap(last, now) {
		return
	}
	r.client.ReloadState(context.Background())
}

// nodeFailure reports whether err says that a node is unreachable, too
// slow, or not (or no longer) the one serving the slot: every error except
// the caller's own cancellation, a closed client, and the replies of a
// healthy node (a script error, OOM, BUSY, NOSCRIPT ...), which a new slot
// map would not change.
func nodeFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, redis.ErrClosed):
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		// Refused or reset connections, EOF, timeouts (the Limiter's
		// deadline included), an exhausted connection pool.
		return true
	}
	if _, moved := redis.IsMovedError(err); moved {
		return true
	}
	if _, ask := redis.IsAskError(err); ask {
		return true
	}
	return redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsReadOnlyError(err) || redis.IsLoadingError(err) || redis.IsMasterDownError(err)
}

// Partitioner names, over a cluster client, the master that serves a
// client key's slot, by its address, so that a core.Limiter keeps a
// circuit breaker per master: a dead master opens its own, and decisions
// on the other masters go on through Redis (see core.Partitioned). When
// its replica takes over (the Store reloads the slot map, see New), the
// slot's partition is the new master's. Over any other client, a Ring
// included, it returns nil: the Store is one partition.
//
// The name costs a read of go-redis's slot map, never a round trip: until
// the client has loaded its map, every key is in one partition "", while
// a goroutine loads it (at most one at a time, at most five a second).
func (s *Store) Partitioner() func(key string) string {
	if s.part == nil {
		return nil
	}
	return s.part.name
}

// partitioner names the master of a client key's slot over a cluster
// client (see Store.Partitioner).
type partitioner struct {
	client  *redis.ClusterClient
	timeout time.Duration // of a load
	loaded  atomic.Bool   // the client has a slot map
	loading atomic.Bool   // a load is under way
	last    atomic.Int64  // time.Now().UnixNano() of the last load started
}

// newPartitioner returns the partitioner of client, or nil when it is no
// cluster client.
func newPartitioner(client redis.UniversalClient, timeout time.Duration) *partitioner {
	if c, ok := client.(*redis.ClusterClient); ok {
		return &partitioner{client: c, timeout: timeout}
	}
	return nil
}

// name returns the address of the master serving key's slot (key has no
// braces, so that its slot is its hash tag's), "" until the client has a
// slot map or when the map has no master for it.
func (p *partitioner) name(key string) string {
	if !p.loaded.Load() {
		p.load()
		return ""
	}
	// With a slot map loaded, MasterForKey reads it, and at most starts a
	// reload on a goroutine of go-redis's own: ctx is not used.
	m, err := p.client.MasterForKey(context.Background(), key)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// load has the client load its slot map on a goroutine, unless a load is
// under way or one started within reloadEvery.
func (p *partitioner) load() {
	now := time.Now().UnixNano()
	last := p.last.Load()
	if now-last < int64(reloadEvery) || !p.last.CompareAndSwap(last, now) || !p.loading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		defer cancel()
		if _, err := p.client.MasterForKey(ctx, ""); err == nil {
			p.loaded.Store(true)
		}
	}()
}

// failedOn returns err, the failure of group g of a Take over a cluster
// client, naming the master of g's first key, and sets the Err of g's
// requests in out to it, so that a Limiter counts it against that
// master's breaker alone (see core.Partitioned). Over any other client
// it returns err and leaves out as it is.
func (s *Store) failedOn(g *group, out []core.Decision, err error) error {
	if s.part == nil {
		return err
	}
	err = fmt.Errorf("master %s: %w", s.part.name(g.reqs[0].Key), err)
	for _, i := range g.idx {
		out[i].Err = err
	}
	return err
}
