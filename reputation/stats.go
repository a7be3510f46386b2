package reputation

// Stats is what a Tracker has scored and done, for metrics.
type Stats struct {
	// Signals counts the signals scored, by kind: every kind, 0 included.
	Signals map[Signal]uint64
	// Bands are Config.Bands's, in order.
	Bands []BandStats
	// MaxScore and MeanScore are the highest and the mean score held in
	// process.
	MaxScore, MeanScore float64
}

// BandStats is what a band holds and has done.
type BandStats struct {
	// Name is the band's.
	Name string
	// Clients is how many clients this server holds in the band.
	Clients int
	// Bans counts the bans made as clients entered it; in shadow mode
	// (Config.Shadow), those it would have made.
	Bans uint64
}

// Stats returns what t has scored and done so far.
func (t *Tracker) Stats() Stats {
	st := Stats{Signals: make(map[Signal]uint64, Reported)}
	for s := Denied; s <= Reported; s++ {
		st.Signals[s] = t.signals[s].Load()
	}
	clients := make([]int, len(t.bands))
	n, sum := 0, 0.0
	t.scores.Range(t.now(), func(_ string, v float64) {
		if i := t.band(v); i >= 0 {
			clients[i]++
		}
		n++
		sum += v
		st.MaxScore = max(st.MaxScore, v)
	})
	if n > 0 {
		st.MeanScore = sum / float64(n)
	}
	st.Bands = make([]BandStats, len(t.bands))
	for i, b := range t.bands {
		st.Bands[i] = BandStats{Name: b.Name, Clients: clients[i], Bans: t.banned[i].Load()}
	}
	return st
}
