package memstore

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestExpiredStateDecidesLikeNone checks, on random histories, the premise
// of the store's expiry: once past its expires, state decides exactly as no
// state at all, so treating it as fresh (and the janitor deleting it)
// changes no Decision. At now == expires exactly, the bucket arithmetic may
// still leave a float residue (one unit of Remaining, 1µs of Delay); the
// store treats that instant as expired too.
func TestExpiredStateDecidesLikeNone(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 50_000 {
		alg := limits.Algorithms[core.Algorithm]()[r.IntN(len(limits.Algorithms[core.Algorithm]()))]
		p := core.Policy{Algorithm: alg, Limit: 1 + r.Int64N(20), Window: time.Duration(1+r.Int64N(5000)) * time.Millisecond}
		if limits.IsBucket(alg) && r.IntN(2) == 0 {
			p.Burst = 1 + r.Int64N(30)
		}
		st := state{kind: kindOf(alg)}
		fresh := true
		now := t0.UnixMicro() + r.Int64N(1e9)
		for range 1 + r.IntN(10) {
			now += r.Int64N(p.Window.Microseconds())
			if !fresh && st.expires <= now {
				st, fresh = state{kind: st.kind}, true
			}
			if step(&st, fresh, &p, 1+r.Int64N(limits.Capacity(p.Algorithm, p.Limit, p.Burst)), now).allowed {
				fresh = false
			}
		}
		if fresh {
			continue
		}
		for _, at := range []int64{st.expires + 1, st.expires + 1 + r.Int64N(p.Window.Microseconds())} {
			c := 1 + r.Int64N(limits.Capacity(p.Algorithm, p.Limit, p.Burst))
			stale := st
			if st.log != nil {
				lg := *st.log
				lg.entries = slices.Clone(lg.entries)
				stale.log = &lg
			}
			got := step(&stale, false, &p, c, at)
			want := step(&state{kind: st.kind}, true, &p, c, at)
			if got != want {
				require.Equal(t, want, got, "%+v, cost %d at expires+%dµs: stale state (%+v) against no state", p, c, at-st.expires, st)
			}
		}
	}
}
