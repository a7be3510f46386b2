package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Peek tells where the clients of reqs stand without spending: out[i] is
// what a request of cost 1 of reqs[i] would be told, with the quota as it
// stands, and nothing is written (see core.Store). Several requests are
// read under every shard's lock they touch: one snapshot. It fails on the
// input Take refuses.
func (s *Store) Peek(_ context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	if len(reqs) == 1 && len(out) == 1 {
		_, err := s.take(&reqs[0], 0, now, &out[0])
		return err
	}
	_, err := s.takeAllAt(now, reqs, out, true)
	return err
}

// Refund gives back the Cost of each request of reqs to what the
// admission that Take returned at for was counted in, if it still is
// there (see core.Store). It fails on the input Take refuses, and on a
// zero at, and then gives back nothing.
func (s *Store) Refund(_ context.Context, at time.Time, reqs []core.Request) error {
	if at.IsZero() {
		return fmt.Errorf("%w: memstore: a refund without the time of its admission", core.ErrInvalidOption)
	}
	if err := checkLen(len(reqs), len(reqs)); err != nil {
		return err
	}
	if len(s.shards) == 0 {
		return errNoStore
	}
	var t taken
	for i := range reqs {
		r := &reqs[i]
		if err := s.stageOf(&t, r); err != nil {
			return fmt.Errorf("memstore: request %d: %w", i, err)
		}
		for j := range i {
			if reqs[j].Key == r.Key && reqs[j].Policy.Name == r.Policy.Name {
				return fmt.Errorf("%w: memstore: requests %d and %d are both for key %q under policy %q", core.ErrInvalidOption, j, i, r.Key, r.Policy.Name)
			}
		}
	}
	now := at.UnixMicro()
	for i := range reqs {
		r := &reqs[i]
		p := &r.Policy
		h := s.hash(r.Key)
		sh := &s.shards[h&s.mask]
		sh.mu.Lock()
		if e := sh.find(h, r.Key, p.Name, kindOf(p.Algorithm)); e != nil && e.st.expires > now {
			giveBack(&e.st, p, r.Cost, now)
		}
		sh.mu.Unlock()
	}
	return nil
}

// giveBack gives back c units (c > 0) of an admission made at now (µs)
// under p, from st, which has not expired (core.Store.Refund): from what
// that admission was counted in, if it is still counted there, never
// below nothing. It changes no time of st, so that the state expires when
// it would have: a give-back frees units, and never holds any longer.
// The Redis scripts (give_back in core/redisstore) do the same.
func giveBack(st *state, p *core.Policy, c, now int64) {
	w := p.Window.Microseconds()
	switch st.kind {
	case fixedWindowKind:
		if st.win == now-now%w {
			st.cur = max(0, st.cur-c)
		}
	case slidingCounterKind:
		switch ws := now - now%w; st.win {
		case ws:
			st.cur = max(0, st.cur-c)
		case ws + w: // moved on: the admission's window is the previous one
			st.prev = max(0, st.prev-c)
		}
	case slidingLogKind:
		if lg := st.log; lg != nil {
			lg.giveBack(now, c)
			// The last admission is the newest entry's, as Redis knows it
			// from the log's members: none once the log is empty.
			if k := len(lg.entries); k > lg.head {
				st.last = min(st.last, lg.entries[k-1].at)
			} else {
				st.last = 0
			}
		}
	case tokenBucketKind, leakyBucketKind:
		// What has drained since the admission (up to the last one, as of
		// which the level is kept) is not given back: of the admission's
		// units, only c less that drain can still be in the bucket (all c
		// when nothing was admitted since, last being the admission). A
		// fuller bucket before the admission would have kept more of them,
		// which the state cannot tell: the give-back errs toward counting.
		// float64(...) forces roundings, as in Lua: see the top of algo.go.
		drained := float64(float64(max(0, st.last-now)) * float64(p.Limit) / float64(w))
		if give := min(float64(c), max(0, float64(c)-drained)); give > 0 {
			st.level = max(0, st.level-give)
		}
	}
}
