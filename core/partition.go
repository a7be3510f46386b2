package core

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

// Partitioned is implemented by a Store whose keys live on independent
// nodes, such as the masters of a Redis Cluster, so that one node's
// failure costs only the keys on that node: the Limiter then keeps a
// circuit breaker per partition instead of one for the whole store.
// A Take over several partitions that fails on some of them sets out[i].Err
// of each request i on a failed partition (see Store.Take), and the Limiter
// counts the failure against those partitions' breakers alone.
type Partitioned interface {
	// Partitioner returns the function that names the partition holding
	// a Request's Key, or nil when the Store is one partition. NewLimiter
	// calls it once; the Limiter calls the function on every decision,
	// so it must be cheap, never block, and be safe for concurrent use.
	// Names are few (one per node), and may change over time (a replica
	// promoted to master); "" is a partition like any other.
	Partitioner() func(key string) string
}

// maxPartitions bounds the breakers of a Limiter over a Partitioned store:
// a store that names more partitions than that (a node per key, by
// mistake) shares the Limiter's own breaker among the rest.
const maxPartitions = 1024

// idleProbes is how many probe intervals an open breaker goes without a
// request before it is idle: its partition is no longer named (its
// slots moved to a promoted replica), and it tells nothing of the
// store's health.
const idleProbes = 10

// partitions is a Limiter's breakers, one per partition of its store.
// The hot path reads the map alone, with no lock: it is copied on write,
// when the store names a partition the first time.
type partitions struct {
	name  func(key string) string
	m     atomic.Pointer[map[string]*breaker]
	mu    sync.Mutex               // taken to add to m
	own   *breaker                 // the Limiter's: a new breaker's threshold and interval; a full table's
	clock func(at time.Time) int64 // the Limiter's elapsed
}

// newPartitions returns the breakers of a store whose Partitioner is name,
// each like own (the Limiter's) but for the degraded period after a
// failure, which stays own's: one for the Limiter.
func newPartitions(name func(key string) string, own *breaker, clock func(time.Time) int64) *partitions {
	p := &partitions{name: name, own: own, clock: clock}
	m := map[string]*breaker{}
	p.m.Store(&m)
	return p
}

// of returns the breaker of key's partition, for a request at at.
func (p *partitions) of(key string, at time.Time) *breaker {
	name := p.name(key)
	if b, ok := (*p.m.Load())[name]; ok {
		return b
	}
	return p.add(name, p.clock(at))
}

// add returns the breaker of the partition name, made now: in a copy of
// the map, which replaces it. A full table first drops the breakers that
// hold nothing (closed, no failure counted) or are idle; when none can go,
// the partition shares the overflow breaker.
func (p *partitions) add(name string, now int64) *breaker {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.m.Load()
	if b, ok := old[name]; ok {
		return b
	}
	m := make(map[string]*breaker, len(old)+1)
	for k, b := range old {
		if len(old) < maxPartitions || !b.idle(now) {
			m[k] = b
		}
	}
	if len(m) >= maxPartitions {
		return p.own
	}
	b := &breaker{threshold: p.own.threshold, interval: p.own.interval}
	m[strings.Clone(name)] = b
	p.m.Store(&m)
	return b
}

// failing reports whether any partition's breaker is open, idle ones
// aside.
func (p *partitions) failing(now int64) bool {
	for _, b := range *p.m.Load() {
		if b.state.Load()&brkOpen != 0 && !b.idle(now) {
			return true
		}
	}
	return false
}

// idle reports whether b holds nothing worth keeping at now: closed with
// no failure counted, or open with no request for idleProbes intervals
// (every request that finds it open and due starts a probe, which moves
// nextProbe on).
func (b *breaker) idle(now int64) bool {
	w := b.state.Load()
	if w&brkOpen == 0 {
		return w&brkCount == 0
	}
	return !b.probing.Load() && now-b.nextProbe.Load() > idleProbes*b.interval
}

// breakers is the breakers of one request: one for a Take, one per
// partition its requests touch for a Take.
type breakers struct {
	n   int
	all [limits.MaxLayers]*breaker
}

// add adds b, unless it is there already.
func (bs *breakers) add(b *breaker) {
	for _, c := range bs.all[:bs.n] {
		if c == b {
			return
		}
	}
	bs.all[bs.n] = b
	bs.n++
}

// list returns the breakers.
func (bs *breakers) list() []*breaker { return bs.all[:bs.n] }

// failedOn counts a store failure of reqs, which touched the breakers of
// bs, against the partitions that failed: when reqs touched several, the
// breaker of each request j whose out[j].Err the store set (once per
// breaker); its one breaker otherwise. A failure the store set on no
// request of reqs touching several is counted against none: a dead node
// must never open a healthy one's breaker. The breakers of probes (the
// bits of probes) are not counted: a probe reports itself. out is the
// store's, read before the fallback clears it.
func (l *Limiter) failedOn(bs *breakers, probes uint32, reqs []Request, out []Decision, at time.Time) {
	now := l.elapsed(at)
	list := bs.list()
	if len(list) == 1 {
		if probes == 0 {
			list[0].fail(now)
		}
		return
	}
	counted := probes // bits of list: probes, and breakers counted already
	for j := range out {
		if out[j].Err == nil {
			continue
		}
		b := l.parts.of(reqs[j].Key, at)
		for i, c := range list {
			if c == b {
				if counted&(1<<i) == 0 {
					counted |= 1 << i
					c.fail(now)
				}
				break
			}
		}
	}
}

// open reports whether the breaker of any of reqs' partitions is open.
func (l *Limiter) open(reqs []Request, at time.Time) bool {
	if l.parts == nil {
		return l.brk.state.Load()&brkOpen != 0
	}
	for i := range reqs {
		if l.parts.of(reqs[i].Key, at).state.Load()&brkOpen != 0 {
			return true
		}
	}
	return false
}
