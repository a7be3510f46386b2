package reputation

// OnOutcome sets fn to hear what t did of each signal it scored: the
// client's key, the signal, the score after it, the band it is in ("":
// none) and whether t acted (banned it).
func OnOutcome(t *Tracker, fn func(key string, s Signal, score float64, band string, acted bool)) {
	t.onOutcome = fn
}
