package memstore

import (
	"flag"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

var debugHist = flag.Bool("denialhist", false, "TestDenialSearchIsShort: log the histograms of admission tests, with the old estimates too, and do not bound them")

// logUniform returns an integer in [lo, hi], log-uniformly, so that small
// and extreme values are both drawn often.
func logUniform(r *rand.Rand, lo, hi int64) int64 {
	v := int64(math.Exp(math.Log(float64(lo)) + r.Float64()*(math.Log(float64(hi))-math.Log(float64(lo)))))
	return min(max(v, lo), hi)
}

// randomPolicy returns a valid policy of the algorithm a, from the whole
// range Validate allows: limits up to limits.MaxLimit, windows from
// limits.MinWindow to limits.MaxWindow, bursts up to what refills within
// limits.MaxWindow.
func randomPolicy(r *rand.Rand, a core.Algorithm) core.Policy {
	for {
		p := core.Policy{Name: "p", Algorithm: a,
			Limit:  logUniform(r, 1, limits.MaxLimit),
			Window: time.Duration(logUniform(r, limits.MinWindow.Microseconds(), limits.MaxWindow.Microseconds())) * time.Microsecond,
		}
		switch r.IntN(4) {
		case 0:
			p.Limit = limits.MaxLimit
		case 1:
			p.Window = limits.MaxWindow
		}
		if limits.IsBucket(a) && r.IntN(2) == 0 {
			p.Burst = logUniform(r, 1, limits.MaxLimit)
		}
		if a == core.SlidingWindowLog {
			p.Limit = min(p.Limit, limits.MaxLogLimit)
		}
		if p.Validate() == nil {
			return p
		}
	}
}

// searchRef is the search a denial runs: firstPass from est, counting the
// admission tests it makes.
func searchRef(lo, hi, est int64, passes func(int64) bool) (k int64, tests int) {
	k = firstPass(lo, hi, est, func(k int64) bool {
		tests++
		return passes(k)
	})
	return k, tests
}

// bisect is the first k in [lo, hi] at which passes holds (hi passing
// without a call), by sort.Search's bisection alone: the reference,
// whatever estimate, and none of firstPass's code.
func bisect(lo, hi int64, passes func(int64) bool) int64 {
	return lo + int64(sort.Search(int(hi-lo), func(i int) bool { return passes(lo + int64(i)) }))
}

// retrySearch re-runs the search of a denial of cost c at now against st
// (as the algorithm saw it, before deciding), with the estimate the
// algorithm uses, and returns its answer in µs from now, the admission
// tests it made, and the answer of bisection alone.
// With old, it uses the estimates of before the closed forms (real-number
// ones, from now), for comparison.
func retrySearch(st *state, p *core.Policy, c, now int64, old bool) (wait int64, tests int, ref int64) {
	l, w, b := p.Limit, p.Window.Microseconds(), limits.Capacity(p.Algorithm, p.Limit, p.Burst)
	el := now - st.last
	fl, fw := float64(l), float64(w)
	switch st.kind {
	case tokenBucketKind, leakyBucketKind:
		passes := func(k int64) bool {
			return float64(max(0, st.level-float64(float64(el+k)*float64(l)/float64(w)))+float64(c)) <= float64(b)
		}
		est := leakyEstimate(st.level, l, b, w, c) - el
		if old {
			level := max(0, st.level-float64(float64(el)*fl/fw))
			est = int64(math.Ceil(float64(level+float64(c)-float64(b)) * fw / fl))
		}
		wait, tests = searchRef(0, st.expires-now, est, passes)
		return wait, tests, bisect(0, st.expires-now, passes)
	case slidingCounterKind:
		ws := now - now%w
		var cur, prev int64
		switch st.win {
		case ws:
			cur, prev = st.cur, st.prev
		case ws - w:
			prev = st.cur
		}
		if need := l - cur - c; need >= 0 {
			passes := func(at int64) bool { return fits(weigh(prev, w, at), cur, c, l) }
			est := counterEstimate(prev, w, float64(sumBound(l, c, true)-float64(cur)))
			if old {
				est = w - int64(math.Floor(min(float64(need)*fw/float64(prev), fw)))
			}
			at, n := searchRef(now-ws, w, est, passes)
			return ws + at - now, n, ws + bisect(now-ws, w, passes) - now
		}
		passes := func(at int64) bool { return fits(weigh(cur, w, at), 0, c, l) }
		est := counterEstimate(cur, w, sumBound(l, c, false))
		if old {
			est = w - int64(math.Floor(min(float64(l-c)*fw/float64(cur), fw)))
		}
		at, n := searchRef(0, w, est, passes)
		return ws + w + at - now, n, ws + w + bisect(0, w, passes) - now
	}
	return 0, 0, 0
}

// TestDenialSearchIsShort drives random histories of random and extreme
// policies (limits up to limits.MaxLimit, windows up to limits.MaxWindow,
// bursts as deep as Validate allows) and, at every denial of the three
// algorithms that search for RetryAfter, checks that:
//
//   - RetryAfter is exact: the same request is admitted at now + wait and
//     denied a microsecond before;
//   - the search from the estimate gives what bisection alone gives, and
//     what the search from the real-number estimates of before gave;
//   - it makes at most maxDenialTests admission tests.
func TestDenialSearchIsShort(t *testing.T) {
	maxDenialTests := 4
	if *debugHist {
		maxDenialTests = 1 << 30
	}
	hist, oldHist := map[core.Algorithm]map[int]int{}, map[core.Algorithm]map[int]int{}
	r := rand.New(rand.NewPCG(12, 3))
	denials, total, worst := 0, 0, 0
	for _, a := range []core.Algorithm{core.TokenBucket, core.LeakyBucket, core.SlidingWindowCounter} {
		for range 3000 {
			p := randomPolicy(r, a)
			w, b := p.Window.Microseconds(), limits.Capacity(p.Algorithm, p.Limit, p.Burst)
			st := state{kind: kindOf(a)}
			fresh := true
			now := t0.UnixMicro() + r.Int64N(w)
			for range 20 {
				switch r.IntN(4) {
				case 0:
				case 1:
					now += r.Int64N(4)
				case 2:
					now += r.Int64N(max(w/p.Limit, 1) + 1)
				default:
					now += r.Int64N(w + 1)
				}
				if !fresh && st.expires <= now {
					st, fresh = state{kind: st.kind}, true
				}
				c := logUniform(r, 1, b)
				if r.IntN(4) == 0 {
					c = b
				}
				before := st
				o := step(&st, fresh, &p, c, now)
				if o.allowed {
					fresh = false
					continue
				}
				denials++
				wait, tests, ref := retrySearch(&before, &p, c, now, false)
				oldWait, oldTests, _ := retrySearch(&before, &p, c, now, true)
				require.Equal(t, oldWait, wait, "%+v: cost %d at %d: the search from the old estimate", p, c, now)
				if *debugHist {
					if oldHist[a] == nil {
						oldHist[a] = map[int]int{}
					}
					oldHist[a][oldTests]++
				}
				require.Equal(t, o.wait, wait, "%+v: cost %d at %d: the test's search is the algorithm's", p, c, now)
				require.Equal(t, ref, wait, "%+v: cost %d at %d, state %+v: search from the estimate against bisection", p, c, now, before)
				require.LessOrEqual(t, tests, maxDenialTests, "%+v: cost %d at %d, state %+v: admission tests of one denial", p, c, now, before)
				if hist[a] == nil {
					hist[a] = map[int]int{}
				}
				hist[a][tests]++
				total += tests
				worst = max(worst, tests)
				// Exact: admitted at now+wait, denied a microsecond before.
				for _, at := range []int64{now + wait - 1, now + wait} {
					if at < now {
						continue
					}
					probe := before
					got := step(&probe, before.expires <= at, &p, c, at).allowed
					require.Equal(t, at == now+wait, got, "%+v: cost %d, denied at %d with RetryAfter %dµs: Allowed at %d", p, c, now, wait, at)
				}
			}
		}
	}
	require.Greater(t, denials, 10_000, "denials checked")
	t.Logf("admission tests per denial: %v", hist)
	if *debugHist {
		t.Logf("with the old estimates: %v", oldHist)
	}
	t.Logf("%d denials: %.2f admission tests each on average, %d at most", denials, float64(total)/float64(denials), worst)
}
