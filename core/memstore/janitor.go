package memstore

import (
	"sync"
	"time"
)

// janitor is the goroutine that deletes expired state every interval.
type janitor struct {
	stop chan struct{} // closed by halt
	done chan struct{} // closed when run returns
	once sync.Once
}

// run sweeps shards every interval, at the time c tells, until halt.
func (j *janitor) run(shards []shard, c clock, interval time.Duration) {
	defer close(j.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			sweepShards(shards, c.now(), j.stop)
		}
	}
}

// halt tells run to return; it does not wait. Safe to call more than once.
func (j *janitor) halt() {
	j.once.Do(func() { close(j.stop) })
}

// sweepShards sweeps each shard in turn, holding one shard's lock at a time,
// and gives up early once stop is closed (a nil stop never is).
func sweepShards(shards []shard, now int64, stop <-chan struct{}) {
	for i := range shards {
		select {
		case <-stop:
			return
		default:
		}
		sh := &shards[i]
		sh.mu.Lock()
		sh.sweep(now)
		sh.mu.Unlock()
	}
}
