package leasebound

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
)

// entry is one layer's part of an admission.
type entry struct {
	us       int64 // when, in Unix microseconds (as the stores date)
	cost     int64
	refunded bool
}

// record is what a layer's key admitted, by the admissions' true
// times.
type record struct {
	p       core.Policy
	net     map[int64]int64 // window index -> units admitted, less refunds
	entries []*entry
}

// admit records an admission of cost at at, under limit (the policy's,
// or a plan's in force), and returns it and the violation it makes, if
// any.
func (tr *record) admit(at time.Time, cost, limit int64) (*entry, string) {
	e := &entry{us: at.UnixMicro(), cost: cost}
	tr.entries = append(tr.entries, e)
	if tr.p.Algorithm == core.TokenBucket {
		return e, ""
	}
	w, l := tr.p.Window.Microseconds(), limit
	i := floorDiv(e.us, w)
	tr.net[i] += cost
	if tr.net[i] > l {
		return e, fmt.Sprintf("window %d holds %d, limit %d", i, tr.net[i], l)
	}
	if tr.p.Algorithm == core.SlidingWindowCounter {
		// prev*(w-el)/w + cur <= l, times w, in integers; the stores
		// round in float64, so the slack of a billionth.
		el := e.us - i*w
		sum := tr.net[i-1]*(w-el) + tr.net[i]*w
		if sum > l*w+max(1, l*w/1e9) {
			return e, fmt.Sprintf("sliding estimate %.6f (prev %d, cur %d, %d of %d µs in), limit %d",
				float64(sum)/float64(w), tr.net[i-1], tr.net[i], el, w, l)
		}
	}
	return e, ""
}

// refund takes e out of the truth, from now on.
func (tr *record) refund(e *entry, _ time.Time) {
	if e == nil || e.refunded {
		return
	}
	e.refunded = true
	if tr.p.Algorithm != core.TokenBucket {
		tr.net[floorDiv(e.us, tr.p.Window.Microseconds())] -= e.cost
	}
}

// finish checks a token bucket's intervals: for every [a, b] between two
// admissions, sum <= Burst + rate*(b-a) + rate*Lease. Times are the
// stores' microseconds; a grant's lifetime, counted in nanoseconds, spans
// at most a microsecond more of them.
func (tr *record) finish() string {
	if tr.p.Algorithm != core.TokenBucket {
		return ""
	}
	w, l := tr.p.Window.Microseconds(), tr.p.Limit
	capacity := l
	if tr.p.Burst > 0 {
		capacity = tr.p.Burst
	}
	lease := int64(0)
	if tr.p.Lease > 0 {
		lease = (int64(tr.p.Lease)+999)/1000 + 1
	}
	// Times w: (S_j - S_{i-1})*w - l*(t_j - t_i) <= capacity*w + l*lease.
	limit := capacity*w + l*lease + max(1, capacity*w/1e9)
	var sum int64
	var low int64 // min over i <= j of S_{i-1}*w + ... - see below
	lowAt := -1
	for j, e := range tr.entries {
		if e.refunded {
			continue
		}
		if b := sum*w - l*e.us; lowAt < 0 || b < low {
			low, lowAt = b, j
		}
		sum += e.cost
		if a := sum*w - l*e.us; a-low > limit {
			return fmt.Sprintf("token bucket: %d µs from admission %d to %d admitted %.3f units more than Burst %d + rate*(b-a) + rate*Lease (%d µs)",
				e.us-tr.entries[lowAt].us, lowAt, j, float64(a-low-limit)/float64(w), capacity, lease)
		}
	}
	return ""
}

// floorDiv is a/b rounded down.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
