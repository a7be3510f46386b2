package layersfile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
)

// algorithms are the algorithms by their full and short names, in the
// order the errors list them.
var algorithms = []struct {
	alg   core.Algorithm
	short string
}{
	{core.FixedWindow, "fixed"},
	{core.SlidingWindowLog, "log"},
	{core.SlidingWindowCounter, "counter"},
	{core.TokenBucket, "token"},
	{core.LeakyBucket, "leaky"},
}

// Algorithms returns every algorithm, in the order the errors list them.
func Algorithms() []core.Algorithm {
	out := make([]core.Algorithm, len(algorithms))
	for i, a := range algorithms {
		out[i] = a.alg
	}
	return out
}

// algorithmChoices is what an error about an algorithm offers:
// "fixed_window (fixed), sliding_window_log (log), ...".
func algorithmChoices() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = string(a.alg) + " (" + a.short + ")"
	}
	return strings.Join(names, ", ")
}

// Algorithm returns the algorithm of name: its full name (token_bucket) or
// its short one (token), in any case. An unknown or empty name is an
// error that lists them all: a policy says its algorithm.
func Algorithm(name string) (core.Algorithm, error) {
	for _, a := range algorithms {
		if strings.EqualFold(name, string(a.alg)) || strings.EqualFold(name, a.short) {
			return a.alg, nil
		}
	}
	if name == "" {
		return "", fmt.Errorf("missing: want one of %s", algorithmChoices())
	}
	return "", fmt.Errorf("unknown algorithm %q: want one of %s", name, algorithmChoices())
}

// PolicyFields are the names of the fields of a core.Policy that
// SetPolicyField sets, in the order the errors list them.
var PolicyFields = []string{"name", "algorithm", "limit", "window", "burst", "lockout", "lockout_max", "lockout_memory", "fail_closed", "lease"}

// SetPolicyField sets the field of p that field names (one of
// PolicyFields) to what text says: name as it is; algorithm as
// Algorithm reads it; limit and burst as whole numbers; window, lockout,
// lockout_max, lockout_memory, fail_closed and lease as durations ("1m", "15m",
// "5s"). The error names the field. p is not validated: that is the
// caller's, once every field is set.
func SetPolicyField(p *core.Policy, field, text string) error {
	var err error
	switch field {
	case "name":
		p.Name = text
	case "algorithm":
		p.Algorithm, err = Algorithm(text)
	case "limit":
		p.Limit, err = wholeNumber(text)
	case "burst":
		p.Burst, err = wholeNumber(text)
	case "window":
		p.Window, err = time.ParseDuration(text)
	case "lockout":
		p.Lockout, err = time.ParseDuration(text)
	case "lockout_max":
		p.LockoutMax, err = time.ParseDuration(text)
	case "lockout_memory":
		p.LockoutMemory, err = time.ParseDuration(text)
	case "fail_closed":
		p.FailClosed, err = time.ParseDuration(text)
	case "lease":
		p.Lease, err = time.ParseDuration(text)
	default:
		return fmt.Errorf("unknown field %q (want %s)", field, strings.Join(PolicyFields, ", "))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// wholeNumber reads a limit or a burst.
func wholeNumber(text string) (int64, error) {
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%s is out of range", text)
		}
		return 0, fmt.Errorf("%q is not a whole number", text)
	}
	return n, nil
}
