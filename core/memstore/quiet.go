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
