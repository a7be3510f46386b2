package memstore

import "math"

// The searches for RetryAfter: the first microsecond at which a denied
// request's own admission test passes, from an estimate that lands
// within a microsecond or two of it.

// firstPass returns the smallest k in [lo, hi] at which passes(k) holds,
// where passes is monotonic on [lo, hi) (false, then true for good) and hi
// counts as passing (passes(hi) is never called). This keeps RetryAfter
// exact: it is the first microsecond at which the store's own admission
// test passes, not a rounded formula that may be off.
//
// est is the estimate of k. A real-number one may be off by hours where a
// sum rounds in steps larger than one microsecond's change (a limit near
// 10^12, a long window); the algorithms' estimates (leakyEstimate
// and counterEstimate, below) solve for the sums' rounding bounds instead,
// and land within a microsecond or two: a denial makes at most 4 calls
// over random and extreme policies (TestDenialSearchIsShort).
// firstPass gallops from est, 1, 2, 4... steps, then bisects: O(log
// |k-est|) calls, and at most about 90 over 366 days whatever est.
func firstPass(lo, hi, est int64, passes func(k int64) bool) int64 {
	good := min(max(est, lo), hi)
	bad := lo - 1 // fails; never called
	if good < hi && !passes(good) {
		bad, good = good, hi
		for d := int64(1); bad+d < hi; d *= 2 {
			if passes(bad + d) {
				good = bad + d
				break
			}
			bad += d
		}
	} else {
		for d := int64(1); good-d >= lo; d *= 2 {
			if !passes(good - d) {
				bad = good - d
				break
			}
			good -= d
		}
	}
	for good-bad > 1 {
		mid := bad + (good-bad)/2
		if passes(mid) {
			good = mid
		} else {
			bad = mid
		}
	}
	return good
}

// The estimates below put firstPass within a microsecond or two of the
// answer, so that a denial costs a few admission tests, not the ~50 that a
// gallop from a real-number estimate takes where float64 steps are coarse.
// They are only estimates: firstPass still tests its way to the exact
// first passing microsecond, so a rounding in them costs a test, never a
// wrong answer. core/redisstore/prelude.lua has the same functions.

// gapAbove is the distance from x >= 0 to the next float64 above it; 0 for
// 0 (whose gap the estimates may ignore).
func gapAbove(x float64) float64 {
	if x == 0 {
		return 0
	}
	_, e := math.Frexp(x)
	return math.Ldexp(1, e-53)
}

// sumBound is, about, the largest real v at which fl(fl(v) + c) <= b
// (rounded) or fl(v + c) <= b for a float v (not rounded): the admission
// tests of the leaky bucket and the sliding window counter. b and c are
// integers, b >= c.
func sumBound(b, c int64, rounded bool) float64 {
	d := float64(b - c) // exact: integers below 2^53
	h := gapAbove(float64(b)) / 2
	y := d // the largest float64 y with fl(y + c) <= b
	if gapAbove(d) <= h {
		y = float64(d + h)
	}
	if rounded {
		return float64(y + gapAbove(y)/2)
	}
	return y
}

// counterEstimate is the elapsed time into the window at which count,
// weighed by the part of the previous window still in the sliding one,
// falls to bound: count*(w-el)/w = bound.
func counterEstimate(count, w int64, bound float64) int64 {
	return w - int64(math.Floor(min(float64(bound*float64(w))/float64(count), float64(w))))
}

// leakyEstimate is the time after the last admission, at level, at which
// the drained level, rounded, and c round to b or less (sumBound), for
// both buckets. It counts from the last admission, not from now, since the
// drain since then is one product, not a sum of two.
func leakyEstimate(level float64, l, b, w, c int64) int64 {
	need := float64(level - sumBound(b, c, true))
	return int64(math.Ceil(float64(need*float64(w)) / float64(l)))
}
