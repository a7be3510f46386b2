package memstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// refLog is the sliding window log as it was first written: a slice of
// (time, units) entries, trimmed by copying and summed on every request.
// The unitLog must decide exactly as it does.
type refLog struct {
	log           []struct{ at, n int64 }
	last, expires int64
}

func (st *refLog) step(l, w, c, now int64) outcome {
	cut := 0
	for cut < len(st.log) && st.log[cut].at <= now-w {
		cut++
	}
	st.log = append(st.log[:0], st.log[cut:]...)
	var n int64
	for _, e := range st.log {
		n += e.n
	}
	o := outcome{}
	if n+c <= l {
		if k := len(st.log); k > 0 && st.log[k-1].at == now {
			st.log[k-1].n += c
		} else {
			st.log = append(st.log, struct{ at, n int64 }{now, c})
		}
		n += c
		st.last, st.expires = now, now+w
		o.allowed = true
	} else {
		k, cum := n+c-l, int64(0)
		for _, e := range st.log {
			if cum += e.n; cum >= k {
				o.wait = e.at + w - now
				break
			}
		}
	}
	o.remaining = l - n
	if n > 0 {
		o.reset = st.log[len(st.log)-1].at + w - now
	}
	return o
}

// TestSlidingLogMatchesReference drives the store's sliding log and the
// reference one with the same random histories: bursts within one
// microsecond, heavy requests, gaps longer than the window, clocks
// stepping back. Every outcome must be the same.
func TestSlidingLogMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var allowed, denied int
	defer func() {
		assert.GreaterOrEqual(t, allowed, 100_000, "allowed requests: the histories do not test both outcomes")
		assert.GreaterOrEqual(t, denied, 100_000, "denied requests: the histories do not test both outcomes")
	}()
	for range 3000 {
		l := 1 + r.Int64N(200)
		w := 1000 + r.Int64N(20_000)
		p := core.Policy{Algorithm: core.SlidingWindowLog, Limit: l, Window: time.Duration(w) * time.Microsecond}
		st := state{kind: slidingLogKind}
		var ref refLog
		fresh := true
		now := r.Int64N(1e12)
		for i := range 400 {
			switch x := r.IntN(20); {
			case x < 8: // same microsecond
			case x < 17:
				now += r.Int64N(3 * w / max(l, 1))
			case x < 19:
				now -= r.Int64N(w) // a clock stepping back
			default:
				now += w + r.Int64N(2*w)
			}
			c := 1 + r.Int64N(l)
			if r.IntN(4) > 0 {
				c = 1
			}
			// The store's rules (shard.take, step): expired state is
			// fresh, and a request before the latest admission is
			// decided at that admission.
			if !fresh && st.expires <= now {
				st.clear()
				fresh = true
			}
			at := now
			if ref.expires <= now {
				ref = refLog{log: ref.log[:0]}
			} else {
				at = max(at, ref.last)
			}
			want := ref.step(l, w, c, at)
			got := step(&st, fresh, &p, c, now)
			if got.allowed {
				allowed++
			} else {
				denied++
			}
			// The comparisons run a million times: testify only once
			// they differ, to name the field.
			if got != want {
				require.Equal(t, want, got, "limit %d, window %dµs, request %d (cost %d at %d)", l, w, i, c, at)
			}
			if got.allowed {
				fresh = false
			}
			if n := st.log.len(); n != len(ref.log) {
				require.Equal(t, len(ref.log), n, "request %d: entries in the window", i)
			}
			if lg := st.log; 2*lg.head >= len(lg.entries) && lg.head > 0 {
				require.Failf(t, "log not compacted", "request %d: dead prefix %d of %d entries", i, lg.head, len(lg.entries))
			}
		}
	}
}

func TestGallop(t *testing.T) {
	for n := range 70 {
		for k := 0; k <= n; k++ {
			calls := 0
			got := gallop(n, func(i int) bool {
				require.True(t, 0 <= i && i < n, "n %d: probed %d", n, i)
				calls++
				return i < k
			})
			require.Equal(t, k, got, "gallop(%d) with %d leading trues", n, k)
			require.LessOrEqual(t, calls, 2*bitsLen(k)+3, "gallop(%d) = %d: probes", n, k)
		}
	}
}

func bitsLen(k int) int {
	n := 0
	for ; k > 0; k >>= 1 {
		n++
	}
	return n
}
