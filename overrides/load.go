package overrides

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
)

// LoadConfig says how Load scales limits by its signal.
type LoadConfig struct {
	// High is the signal above which limits shrink: at each Update that
	// reads more than High, the scale falls by Step, down to MinScale.
	High float64
	// Low, below High, is the signal under which limits recover: at each
	// Update that reads less than Low, the scale rises by Step, up to 1.
	// Between Low and High the scale holds: the hysteresis that keeps a
	// signal hovering around High from making limits flap.
	Low float64
	// Step is how much the scale moves at one Update, in (0, 1]; 0 means
	// 0.1.
	Step float64
	// MinScale is the smallest scale, in (0, 1]; 0 means 0.1: limits never
	// shrink below a tenth.
	MinScale float64
	// Interval, when above 0, is how often a goroutine of NewLoad's calls
	// Update, until Close; at least a millisecond. 0 starts no goroutine:
	// the caller calls Update itself (a test, or a loop of its own).
	Interval time.Duration
	// Layers, when not empty, are the only layers (or policy names) Load
	// scales; empty scales every layer.
	Layers []string
}

// Load scales every limit (or those of LoadConfig.Layers) by a factor in
// [MinScale, 1] that follows a load signal: down by a Step at each Update
// that reads the signal above High, up by a Step at each one that reads it
// below Low, unchanged in between. It is a core.PolicySource whose Adjust
// takes no lock. Update samples the signal; with an Interval, a goroutine
// calls it every Interval until Close. It is safe for concurrent use.
//
// The signal is the caller's function: requests in flight (an atomic
// counter the handler increments, and decrements in a defer), a latency,
// a CPU reading.
type Load struct {
	signal func() float64
	cfg    LoadConfig
	scale  atomic.Uint64 // float64 bits
	mu     sync.Mutex    // serializes Update and Close
	stop   chan struct{}
	done   chan struct{}
}

// NewLoad returns a Load over signal with cfg, at scale 1, and starts its
// goroutine when cfg.Interval is above 0 (Close stops it). It fails, with
// an error wrapping core.ErrInvalidOption, on a nil signal, Low not below
// High, a threshold that is NaN or infinite, or a Step, MinScale or
// Interval out of range.
func NewLoad(signal func() float64, cfg LoadConfig) (*Load, error) {
	bad := func(format string, args ...any) (*Load, error) {
		return nil, fmt.Errorf("%w: overrides.NewLoad: %s", core.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if signal == nil {
		return bad("nil signal")
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	if !finite(cfg.High) || !finite(cfg.Low) || cfg.Low >= cfg.High {
		return bad("thresholds low %v and high %v: need finite low < high", cfg.Low, cfg.High)
	}
	if cfg.Step == 0 {
		cfg.Step = 0.1
	}
	if cfg.MinScale == 0 {
		cfg.MinScale = 0.1
	}
	if !(cfg.Step > 0 && cfg.Step <= 1) {
		return bad("step %v is out of range (0, 1]", cfg.Step)
	}
	if !(cfg.MinScale > 0 && cfg.MinScale <= 1) {
		return bad("min scale %v is out of range (0, 1]", cfg.MinScale)
	}
	if cfg.Interval < 0 || (cfg.Interval > 0 && cfg.Interval < time.Millisecond) {
		return bad("interval %v is neither 0 nor at least 1ms", cfg.Interval)
	}
	cfg.Layers = slices.Clone(cfg.Layers)
	l := &Load{signal: signal, cfg: cfg}
	l.scale.Store(math.Float64bits(1))
	if cfg.Interval > 0 {
		l.start()
	}
	return l, nil
}

// Scale returns the factor limits are multiplied by now, in [MinScale, 1].
func (l *Load) Scale() float64 { return math.Float64frombits(l.scale.Load()) }

// Update reads the signal once and moves the scale as LoadConfig says; it
// returns the new scale. A NaN or infinite reading changes nothing.
func (l *Load) Update() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.Scale()
	v := l.signal()
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
	case v > l.cfg.High:
		s = max(l.cfg.MinScale, s-l.cfg.Step)
	case v < l.cfg.Low:
		s = min(1, s+l.cfg.Step)
	}
	// Steps of 0.1 do not add up to 1 exactly: snap to the bounds.
	if math.Abs(s-1) < 1e-9 {
		s = 1
	}
	if math.Abs(s-l.cfg.MinScale) < 1e-9 {
		s = l.cfg.MinScale
	}
	l.scale.Store(math.Float64bits(s))
	return s
}

// start calls Update every Interval on a goroutine of its own, until
// Close.
func (l *Load) start() {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(l.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				l.Update()
			}
		}
	}(l.stop, l.done)
}

// Close stops the goroutine, if any, and waits for it; the scale stays as
// it is, and Update still works. It is idempotent.
func (l *Load) Close() error {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return nil
}

// Adjust returns p with its Limit and Burst multiplied by the scale, when
// Load scales p's layer: rounded down, at least 1, and a burst the scaled
// rate cannot refill within 366 days clamped down to what it
// refills (see Override), so that a valid p stays valid and a scale below
// 1 never loosens it. The scale is every client's: ctx and key are
// unused. It never fails: the error is always nil.
func (l *Load) Adjust(_ context.Context, _ string, p core.Policy) (core.Policy, error) {
	s := l.Scale()
	if s == 1 || (len(l.cfg.Layers) > 0 && !slices.Contains(l.cfg.Layers, p.Name)) {
		return p, nil
	}
	return Override{Scale: s}.applyTo(p), nil
}
