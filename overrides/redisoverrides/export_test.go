package redisoverrides

// Reads returns how many read scripts w has run.
func (w *Watcher) Reads() int64 { return w.reads.Load() }

// Marker returns the marker key of w.
func (w *Watcher) Marker() string { return w.cfg.marker }

// MarkerOf is markerOf.
var MarkerOf = markerOf
