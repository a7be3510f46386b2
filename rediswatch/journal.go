package rediswatch

// journalLen bounds the changes a journal remembers.
const journalLen = 10_000

// A journal remembers the last change this server knows of each target,
// for the last journalLen targets changed: its sequence number (the
// version the change gave Redis) and the ban it made, nil for a lift.
//
// It serves two ends. It orders this server's own changes against those
// the poller applies (a change older than the one already applied to its
// target is not applied again). And when Redis loses its data, it is what
// this server tells Redis about the recent changes, so that a ban lifted
// just before the loss, which a server that had not yet seen the lift
// still holds, is not brought back by that server (see recover.go).
type journal struct {
	last  map[string]change // by target id
	order []stamp           // the changes in the order recorded, to drop the oldest
	head  int               // order[head:] is live
}

type change struct {
	seq int64
	ban *ban // nil: the ban was lifted
}

type stamp struct {
	id  string
	seq int64
}

// seen returns the sequence number of the last change to id, and whether
// the journal remembers one.
func (j *journal) seen(id string) (int64, bool) {
	c, ok := j.last[id]
	return c.seq, ok
}

// record remembers c as the change of id, unless a later one is known.
func (j *journal) record(id string, c change) {
	if j.last == nil {
		j.last = make(map[string]change)
	}
	old, ok := j.last[id]
	switch {
	case ok && old.seq > c.seq:
		return
	case ok && old.seq == c.seq:
		j.last[id] = c // the same change, applied again: its stamp stands
		return
	}
	j.last[id] = c
	j.order = append(j.order, stamp{id, c.seq})
	for len(j.last) > journalLen && j.head < len(j.order) {
		s := j.order[j.head]
		j.order[j.head] = stamp{}
		j.head++
		if c, ok := j.last[s.id]; ok && c.seq == s.seq {
			delete(j.last, s.id)
		}
	}
	// Bound the stale stamps: compact once half are dead.
	if j.head > journalLen && j.head > len(j.order)/2 {
		j.order = append(j.order[:0:0], j.order[j.head:]...)
		j.head = 0
	}
	if len(j.order)-j.head > 4*journalLen {
		live := j.order[:0:0]
		for _, s := range j.order[j.head:] {
			if c, ok := j.last[s.id]; ok && c.seq == s.seq {
				live = append(live, s)
			}
		}
		j.order, j.head = live, 0
	}
}
