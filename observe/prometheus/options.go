package promlimit

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apigate/ratelimit/core"
)

// defaultNamespace starts every metric name unless WithNamespace says
// otherwise: "ratelimit_decisions_total".
const defaultNamespace = "ratelimit"

// Option configures Metrics. New applies the options in order and returns
// the error of the first that refuses its value; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	namespace   string
	buckets     []float64
	constLabels prometheus.Labels
}

// metricName is what a namespace must be: a metric name without colons
// (colons are for recording rules).
var metricName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// labelName is what a constant label's name must be.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// variableLabels are the label names the metrics use themselves, which a
// constant label must not take.
var variableLabels = []string{"limit", "outcome", "kind", "state", "store", "le"}

// WithNamespace sets the prefix of every metric name, "ratelimit" unless
// given: WithNamespace("api") names the decisions counter
// "api_decisions_total". The dashboard and alert rules shipped with this
// module expect the default. ns must be a metric name: letters, digits and
// underscores, not starting with a digit.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !metricName.MatchString(ns) {
			return invalid("WithNamespace", "namespace %q is not a metric name ([a-zA-Z_][a-zA-Z0-9_]*)", ns)
		}
		c.namespace = ns
		return nil
	}
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

// WithConstLabels adds labels of fixed value to every series, as
// prometheus.Opts.ConstLabels does: say, {"service": "checkout"} when
// several services' limiters share one registry. Most setups need none,
// since Prometheus adds the target's job and instance labels. A name must
// be a label name not reserved (no leading "__") and not one of the
// metrics' own labels (limit, outcome, kind, state, store, le); a value
// must be valid UTF-8. Several WithConstLabels add up; a name given twice
// is an error.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) error {
		for name, value := range labels {
			switch {
			case !labelName.MatchString(name) || len(name) >= 2 && name[:2] == "__":
				return invalid("WithConstLabels", "%q is not a label name of one's own", name)
			case slices.Contains(variableLabels, name):
				return invalid("WithConstLabels", "label %q is one of the metrics' own", name)
			case !utf8.ValidString(value):
				return invalid("WithConstLabels", "label %q: value is not valid UTF-8", name)
			}
			if _, ok := c.constLabels[name]; ok {
				return invalid("WithConstLabels", "label %q given twice", name)
			}
		}
		if c.constLabels == nil {
			c.constLabels = make(prometheus.Labels, len(labels))
		}
		for name, value := range labels {
			c.constLabels[name] = value
		}
		return nil
	}
}

// invalid returns the error of option opt refusing its value.
func invalid(opt, format string, args ...any) error {
	return fmt.Errorf("%w: promlimit.%s: %s", core.ErrInvalidOption, opt, fmt.Sprintf(format, args...))
}
