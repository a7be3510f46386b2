// Package overrides changes limits while the API runs: an operator's
// override of one layer's limit, an incident switch that halves every
// limit, a limit that shrinks as load rises. Each is a core.PolicySource:
// give it to a Limiter with core.WithPolicySource, and the Limiter
// consults it on every decision, for every layer, so that a change takes
// effect on the next request, without a restart.
//
//   - Set holds overrides in process, by layer (or policy) name: Put,
//     Delete, Replace.
//   - Load scales limits by a load signal the application supplies
//     (in-flight requests, a latency, a CPU reading): down as the signal
//     rises past a threshold, back up, with hysteresis, once it falls
//     below a lower one.
//   - Package overrides/redisoverrides shares a Set through a Redis hash,
//     so that every app server picks a change up within a second.
//
// A client keeps its usage when its limit changes: the stores decide the
// new policy over the same state (see core.Check.Policy), so a client that
// used 900 of 1,000 is denied under an override to 500 until its usage
// falls below 500, and gets the room at once under one to 10,000.
//
//	live := overrides.New()
//	limiter, err := httplimit.NewLayered(store, layers, core.WithPolicySource(live))
//	...
//	live.Put("search", overrides.Override{Scale: 0.5}) // the next request sees half the limit
package overrides

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apigate/ratelimit/core"
)

// MaxScale is the largest Override.Scale.
const MaxScale = 1e6

// MaxTextLen is the longest text Parse reads.
const MaxTextLen = 256

// Override changes one layer's policy. Its zero fields change nothing:
// Limit and Burst replace the policy's when set (Burst only for the
// buckets, which have one), then Scale, when set, multiplies both (each
// rounded to the nearest integer, at least 1, at most core.MaxLimit). An
// Override that leaves a policy invalid (a burst that takes more than
// core.MaxWindow to fill) makes the Limiter decide by its FailMode, with an
// error wrapping core.ErrInvalidPolicy.
type Override struct {
	// Limit, when not 0, replaces the policy's Limit, in [1, core.MaxLimit].
	Limit int64
	// Burst, when not 0, replaces a bucket's Burst, in [1, core.MaxLimit];
	// the window algorithms have none and ignore it.
	Burst int64
	// Scale, when not 0, multiplies Limit and Burst, in (0, MaxScale].
	Scale float64
}

// Validate reports whether o is usable: at least one field set, each in
// range. The error wraps core.ErrInvalidOption.
func (o Override) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: override: %s", core.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch {
	case o == Override{}:
		return bad("nothing set: give a limit, a burst or a scale")
	case o.Limit < 0 || o.Limit > core.MaxLimit:
		return bad("limit %d is out of range [1, %d]", o.Limit, int64(core.MaxLimit))
	case o.Burst < 0 || o.Burst > core.MaxLimit:
		return bad("burst %d is out of range [1, %d]", o.Burst, int64(core.MaxLimit))
	case math.IsNaN(o.Scale) || o.Scale < 0 || o.Scale > MaxScale:
		return bad("scale %v is out of range (0, %v]", o.Scale, float64(MaxScale))
	}
	return nil
}

// Apply returns p as o changes it.
func (o Override) Apply(p core.Policy) core.Policy {
	if o.Limit > 0 {
		p.Limit = o.Limit
	}
	if o.Burst > 0 && p.Algorithm.IsBucket() {
		p.Burst = o.Burst
	}
	if o.Scale > 0 && o.Scale != 1 {
		p.Limit = scaled(p.Limit, o.Scale)
		if p.Burst > 0 {
			p.Burst = scaled(p.Burst, o.Scale)
		}
	}
	return p
}

// scaled is n*f rounded, in [1, core.MaxLimit].
func scaled(n int64, f float64) int64 {
	v := math.Round(float64(n) * f)
	switch {
	case v < 1:
		return 1
	case v > core.MaxLimit:
		return core.MaxLimit
	}
	return int64(v)
}

// String returns o in the text form Parse reads: its set fields as
// key=value pairs, "limit=500 burst=50 scale=0.5".
func (o Override) String() string {
	var parts []string
	if o.Limit != 0 {
		parts = append(parts, "limit="+strconv.FormatInt(o.Limit, 10))
	}
	if o.Burst != 0 {
		parts = append(parts, "burst="+strconv.FormatInt(o.Burst, 10))
	}
	if o.Scale != 0 {
		parts = append(parts, "scale="+strconv.FormatFloat(o.Scale, 'g', -1, 64))
	}
	return strings.Join(parts, " ")
}

// Parse reads an Override from its text form: key=value pairs separated
// by spaces or commas, the keys limit, burst and scale, each at most once
// ("limit=500", "scale=0.5", "limit=500, burst=50"). It fails, with an
// error wrapping core.ErrInvalidOption, on anything else: an empty text,
// one longer than MaxTextLen, an unknown or repeated key, a number out of
// range, NaN or infinite.
func Parse(s string) (Override, error) {
	bad := func(format string, args ...any) (Override, error) {
		return Override{}, fmt.Errorf("%w: override %q: %s", core.ErrInvalidOption, clip(s), fmt.Sprintf(format, args...))
	}
	if len(s) > MaxTextLen {
		return bad("longer than %d bytes", MaxTextLen)
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' })
	if len(fields) == 0 {
		return bad("empty")
	}
	var o Override
	seen := map[string]bool{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return bad("%q is not key=value", f)
		}
		k = strings.ToLower(k)
		if seen[k] {
			return bad("%s given twice", k)
		}
		seen[k] = true
		switch k {
		case "limit", "burst":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return bad("%s %q is not a positive integer", k, v)
			}
			if k == "limit" {
				o.Limit = n
			} else {
				o.Burst = n
			}
		case "scale":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsInf(x, 0) || math.IsNaN(x) || x <= 0 {
				return bad("scale %q is not a positive number", v)
			}
			o.Scale = x
		default:
			return bad("unknown key %q (limit, burst, scale)", k)
		}
	}
	if err := o.Validate(); err != nil {
		return Override{}, err
	}
	return o, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Set holds overrides in process, by layer name (or, for a Limiter built
// by core.NewLimiter, policy name). It is a core.PolicySource: Adjust is
// one atomic load of an immutable map, and a change is seen by the next
// request. It is safe for concurrent use.
type Set struct {
	mu sync.Mutex // serializes changes
	m  atomic.Pointer[map[string]Override]
}

// New returns an empty Set.
func New() *Set {
	s := new(Set)
	s.m.Store(&map[string]Override{})
	return s
}

// Put sets the override of layer, replacing any. It fails, with an error
// wrapping core.ErrInvalidOption, when o does not validate or layer is no
// valid name (core.Policy's Name rules).
func (s *Set) Put(layer string, o Override) error {
	if err := checkEntry(layer, o); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(*s.m.Load())
	next[layer] = o
	s.m.Store(&next)
	return nil
}

// Delete removes the override of layer, if any.
func (s *Set) Delete(layer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.m.Load()
	if _, ok := cur[layer]; !ok {
		return
	}
	next := maps.Clone(cur)
	delete(next, layer)
	s.m.Store(&next)
}

// Replace sets every override at once, as one change: the requests see
// either the old set or m, never a mix. It fails, changing nothing, when
// any entry is invalid.
func (s *Set) Replace(m map[string]Override) error {
	for layer, o := range m {
		if err := checkEntry(layer, o); err != nil {
			return err
		}
	}
	next := maps.Clone(m)
	if next == nil {
		next = map[string]Override{}
	}
	s.mu.Lock()
	s.m.Store(&next)
	s.mu.Unlock()
	return nil
}

// Snapshot returns a copy of the overrides in force.
func (s *Set) Snapshot() map[string]Override {
	return maps.Clone(*s.m.Load())
}

// Adjust returns p as the override of p.Name changes it, or p.
func (s *Set) Adjust(p core.Policy) core.Policy {
	if o, ok := (*s.m.Load())[p.Name]; ok {
		return o.Apply(p)
	}
	return p
}

// checkEntry checks one override of layer.
func checkEntry(layer string, o Override) error {
	if layer == "" {
		return fmt.Errorf("%w: override: empty layer name", core.ErrInvalidOption)
	}
	if err := (core.Policy{Name: layer, Algorithm: core.FixedWindow, Limit: 1, Window: core.MinWindow}).Validate(); err != nil {
		return fmt.Errorf("%w: override of %q: %w", core.ErrInvalidOption, clip(layer), err)
	}
	return o.Validate()
}
