// Package scores keeps decaying scores by key: each signal adds its weight,
// and a score halves every half-life (exponential decay), so that a client
// who stops misbehaving recovers, and a shared or recycled address too. It
// is what package reputation keeps per client, in a Memory: the scores of
// one process, or this process's copy of the scores every app server
// shares (rediswatch's scores.lua computes the same as Memory.AddAt).
//
// A score is kept as its value at the time of its last signal; its value
// at a later time t is value × 2^(-(t - at) / halfLife), computed when it
// is read or added to. A signal dated before the last one (a clock
// stepping back) is added at the last one's time, so that stepping back
// never makes a score grow by undoing decay.
package scores

import (
	"fmt"
	"math"
	"time"
)

// Forgotten is the score below which a key is forgotten: it decides like
// no score at all, and its memory is freed.
const Forgotten = 1e-3

// MaxWeight bounds a signal's weight, so that no sum of signals overflows
// or loses the small terms: a score of 2^40 is worth 40 half-lives of good
// behaviour, far past any band.
const MaxWeight = 1 << 20

// Decay is v, a score at some time, el µs later under a half-life of hl
// µs. The Redis script computes the same (2^x is Lua's pow; Go's Exp2 may
// differ from it in the last bit, which no band's threshold can tell).
func Decay(v float64, el, hl int64) float64 {
	if el <= 0 {
		return v
	}
	return v * math.Exp2(-float64(el)/float64(hl))
}

// Check reports a bad half-life or weight.
func Check(halfLife time.Duration, w float64) error {
	if halfLife < time.Millisecond || halfLife > 366*24*time.Hour {
		return fmt.Errorf("scores: half-life %v out of [1ms, 366 days]", halfLife)
	}
	if !(w >= 0 && w <= MaxWeight) { // NaN too
		return fmt.Errorf("scores: weight %v out of [0, %d]", w, MaxWeight)
	}
	return nil
}
