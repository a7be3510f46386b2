package promlimit

import (
	"fmt"
	"math"
	"slices"

	"github.com/apigate/ratelimit/core"
)

// namespace starts every metric name: "ratelimit_decisions_total". A
// registry shared by several services prefixes or labels the series with
// prometheus.WrapRegistererWithPrefix or prometheus.WrapRegistererWith.
const namespace = "ratelimit"

// Option configures Metrics. New applies the options in order and returns
// the error of the first that refuses its value; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	buckets []float64
}

// WithBuckets sets the upper bounds, in seconds, of the store latency
// histogram's buckets. They must be at least one, positive, finite and
// strictly increasing (the +Inf bucket is always there). Unless given,
// they are otellimit's, dense between 100µs and 10ms, where Redis answers:
//
//	1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
//	1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1
//
// The alert rules compare the 99th percentile with the Limiter's
// timeout: keep a bound at or near each timeout you use.
func WithBuckets(bounds ...float64) Option {
	return func(c *config) error {
		if len(bounds) == 0 {
			return invalid("WithBuckets", "no bucket")
		}
		for i, b := range bounds {
			if !(b > 0) || math.IsInf(b, 0) {
				return invalid("WithBuckets", "bound %v is not positive and finite", b)
			}
			if i > 0 && b <= bounds[i-1] {
				return invalid("WithBuckets", "bounds %v and %v are not increasing", bounds[i-1], b)
			}
		}
		c.buckets = slices.Clone(bounds)
		return nil
	}
}

// invalid returns the error of option opt refusing its value.
func invalid(opt, format string, args ...any) error {
	return fmt.Errorf("%w: promlimit.%s: %s", core.ErrInvalidOption, opt, fmt.Sprintf(format, args...))
}
