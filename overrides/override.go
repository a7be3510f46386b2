package overrides

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// maxScale is the largest Override.Scale, and maxTextLen the longest text
// Parse reads (shared with package rediswatch).
const (
	maxScale   = limits.MaxOverrideScale
	maxTextLen = limits.MaxOverrideText
)

// Override changes one layer's policy. Its zero fields change nothing:
// Limit and Burst replace the policy's when set (Burst only for the
// buckets, which have one), then Scale, when set, multiplies both (each
// rounded down, at least 1, at most 10^12).
//
// An Override never makes a policy invalid, nor looser than it asks. What
// it derives is clamped down to the nearest valid value: a burst the new
// rate cannot refill within 366 days becomes what it refills, a sliding
// log's limit scaled past 100,000 becomes 100,000. What it sets itself
// that no valid policy has (such a Limit or Burst) makes it not apply: a
// [Set] refuses it when it is put, or keeps the layer's last good override.
// docs/live-limits.md has examples.
type Override struct {
	// Limit, when not 0, replaces the policy's Limit, in [1, 10^12].
	Limit int64
	// Burst, when not 0, replaces a bucket's Burst, in [1, 10^12];
	// the window algorithms have none and ignore it.
	Burst int64
	// Scale, when not 0, multiplies Limit and Burst, in (0, 1e6].
	Scale float64
}

// validate reports whether o is usable, whatever the policy: at least one
// field set, each in range. The error wraps core.ErrInvalidOption.
func (o Override) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: override: %s", core.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch {
	case o == Override{}:
		return bad("nothing set: give a limit, a burst or a scale")
	case o.Limit < 0 || o.Limit > limits.MaxLimit:
		return bad("limit %d is out of range [1, %d]", o.Limit, int64(limits.MaxLimit))
	case o.Burst < 0 || o.Burst > limits.MaxLimit:
		return bad("burst %d is out of range [1, %d]", o.Burst, int64(limits.MaxLimit))
	case math.IsNaN(o.Scale) || o.Scale < 0 || o.Scale > maxScale:
		return bad("scale %v is out of range (0, %v]", o.Scale, float64(maxScale))
	}
	return nil
}

// applyTo returns p as o changes it, valid when p is (see Override). When
// o's own values cannot make a valid policy of p, it returns p unchanged.
func (o Override) applyTo(p core.Policy) core.Policy {
	q := p
	if o.apply(&q) != nil {
		return p
	}
	return q
}

// apply changes *p as o does, what o derives clamped (see Override), or
// returns an error wrapping core.ErrInvalidOption when what o sets itself
// cannot be valid for *p (then *p is half changed: the caller drops it).
// It works in place, on the hot path of every request: a Policy is 72
// bytes, too big to copy at every step.
//
// Design: the line between refusing and clamping is who chose the value.
// A value the operator wrote (limit=200000 on a log, burst=10000 at 1 an
// hour) has no valid policy as written: any clamp would decide by a
// policy nobody asked for, so it is refused, and the operator told at Put.
// A value o only carries over (the burst under a new, slower rate) or
// rounds (Scale) was not asked for as such: clamping it down keeps the
// policy valid and makes it tighter, never looser, so that an override
// that tightens always tightens, and the Limiter never falls to its
// fail mode (open by default) on it.
func (o Override) apply(p *core.Policy) error {
	bucket := limits.IsBucket(p.Algorithm)
	if o.Limit > 0 {
		p.Limit = o.Limit
		if p.Algorithm == core.SlidingWindowLog && p.Limit > limits.MaxLogLimit {
			return fmt.Errorf("%w: override %q: limit %d is above %d, the most a sliding window log keeps per key",
				core.ErrInvalidOption, o.String(), p.Limit, limits.MaxLogLimit)
		}
	}
	if o.Burst > 0 && bucket {
		p.Burst = o.Burst
		if most := limits.MaxBurst(p.Limit, p.Window); p.Burst > most {
			return fmt.Errorf("%w: override %q: burst %d takes more than MaxWindow (366 days) to fill at %d per %v; at most %d",
				core.ErrInvalidOption, o.String(), p.Burst, p.Limit, p.Window, most)
		}
	}
	p.Limit, p.Burst = limits.Derive(p.Algorithm, p.Limit, p.Window, p.Burst, o.Scale)
	return nil
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
// one longer than 256 bytes, an unknown or repeated key, a number out of
// range, NaN or infinite.
func Parse(s string) (Override, error) {
	bad := func(format string, args ...any) (Override, error) {
		return Override{}, fmt.Errorf("%w: override %q: %s", core.ErrInvalidOption, clip(s), fmt.Sprintf(format, args...))
	}
	if len(s) > maxTextLen {
		return bad("longer than %d bytes", maxTextLen)
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
	if err := o.validate(); err != nil {
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
