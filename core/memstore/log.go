package memstore

// unitLog is a sliding window log: the units admitted in the window, one
// entry per distinct microsecond, in ascending time. entries[head:] are in
// the window; entries[:head] have left it and wait for compact, which runs
// once they are at least half of entries, so that forgetting an entry costs
// amortized O(1). Each entry carries the running total of the units logged
// up to and including it, so that the units in the window, and the time of
// the k-th oldest, are found without summing the entries.
type unitLog struct {
	entries []logEntry
	head    int
}

// logEntry is one microsecond of a log: its time, and the units logged up
// to and including it since the log's first entry (or its last compaction).
type logEntry struct{ at, cum int64 }

// base is the running total before the first entry in the window.
func (lg *unitLog) base() int64 {
	if lg.head == 0 {
		return 0
	}
	return lg.entries[lg.head-1].cum
}

// total is the running total after the newest entry.
func (lg *unitLog) total() int64 {
	if len(lg.entries) == 0 {
		return 0
	}
	return lg.entries[len(lg.entries)-1].cum
}

// units is the number of units in the window.
func (lg *unitLog) units() int64 { return lg.total() - lg.base() }

// len is the number of entries in the window.
func (lg *unitLog) len() int { return len(lg.entries) - lg.head }

// forget drops the entries logged at or before cut: O(log k) for k
// entries dropped, and compacts the log once its dead prefix is at least
// half of it.
func (lg *unitLog) forget(cut int64) {
	live := lg.entries[lg.head:]
	if len(live) == 0 || live[0].at > cut {
		return
	}
	lg.head += gallop(len(live), func(i int) bool { return live[i].at <= cut })
	if 2*lg.head >= len(lg.entries) {
		lg.compact(lg.entries[:0])
	}
}

// compact moves the entries in the window to the start of dst (which may
// be entries[:0]) and rebases their running totals on the first of them.
func (lg *unitLog) compact(dst []logEntry) {
	base := lg.base()
	for _, e := range lg.entries[lg.head:] {
		dst = append(dst, logEntry{e.at, e.cum - base})
	}
	lg.entries, lg.head = dst, 0
}

// add logs c units at now, which is no earlier than the newest entry.
func (lg *unitLog) add(now, c int64) {
	if k := len(lg.entries); k > lg.head && lg.entries[k-1].at == now {
		lg.entries[k-1].cum += c
		return
	}
	lg.entries = append(lg.entries, logEntry{now, lg.total() + c})
}

// unitAt returns the time of the k-th oldest unit in the window, for
// 1 <= k <= units: O(log k).
func (lg *unitLog) unitAt(k int64) int64 {
	live, cum := lg.entries[lg.head:], lg.base()+k
	return live[gallop(len(live), func(i int) bool { return live[i].cum < cum })].at
}

// shrink reallocates a log whose array is at least four times larger than
// its entries, so that a key that once logged 100 000 units and now logs 3
// does not keep the large array. The new capacity is twice the length, so
// shrinking and regrowing cost amortized O(1) per entry.
func (lg *unitLog) shrink() {
	if c, n := cap(lg.entries), lg.len(); c >= logShrinkMin && n <= c/4 {
		lg.compact(make([]logEntry, 0, max(2*n, 8)))
	}
}

// logShrinkMin is the smallest log capacity worth shrinking.
const logShrinkMin = 64

// gallop returns the number of leading indexes of [0, n) at which before
// holds, before being true and then false for good. It probes 1, 2, 4, ...
// and then bisects, so it costs O(log k) for a result k: the price of what
// the caller consumes, however long the slice.
func gallop(n int, before func(i int) bool) int {
	lo, hi := 0, 1 // before(lo-1) holds, when lo > 0
	for hi < n && before(hi-1) {
		lo, hi = hi, 2*hi
	}
	hi = min(hi, n)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if before(mid) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// giveBack removes up to c units of the entry logged at now, if it is in
// the window, renumbering the entries after it, and the entry itself once
// it holds none: O(log k + entries after it).
func (lg *unitLog) giveBack(now, c int64) {
	live := lg.entries[lg.head:]
	i := gallop(len(live), func(i int) bool { return live[i].at < now })
	if i == len(live) || live[i].at != now {
		return
	}
	prev := lg.base()
	if i > 0 {
		prev = live[i-1].cum
	}
	give := min(c, live[i].cum-prev)
	for j := i; j < len(live); j++ {
		live[j].cum -= give
	}
	if live[i].cum == prev {
		k := lg.head + i
		lg.entries = append(lg.entries[:k], lg.entries[k+1:]...)
	}
}
