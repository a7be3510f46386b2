package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

var algAliases = map[string]core.Algorithm{
	"fixed": core.FixedWindow, "log": core.SlidingWindowLog, "counter": core.SlidingWindowCounter,
	"token": core.TokenBucket, "leaky": core.LeakyBucket,
}

// ParsePolicy reads "alg=token,limit=100,window=1m[,burst=20][,name=api]".
// alg is an algorithm's name (fixed_window ...), a short name (fixed, log,
// counter, token, leaky), or "all", which gives one policy per algorithm,
// each named after its algorithm unless name is set.
func ParsePolicy(spec string) ([]core.Policy, error) {
	var p core.Policy
	var algs []core.Algorithm
	seen := map[string]bool{}
	for field := range strings.SplitSeq(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("policy %q: %q is not key=value", spec, field)
		}
		if seen[k] {
			return nil, fmt.Errorf("policy %q: %s given twice", spec, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "alg", "algorithm":
			switch {
			case v == "all":
				algs = limits.Algorithms[core.Algorithm]()
			case algAliases[v] != "":
				algs = []core.Algorithm{algAliases[v]}
			case limits.Known(v):
				algs = []core.Algorithm{core.Algorithm(v)}
			default:
				return nil, fmt.Errorf("policy %q: unknown algorithm %q", spec, v)
			}
		case "limit":
			p.Limit, err = strconv.ParseInt(v, 10, 64)
		case "burst":
			p.Burst, err = strconv.ParseInt(v, 10, 64)
		case "window":
			p.Window, err = time.ParseDuration(v)
		case "name":
			p.Name = v
		default:
			return nil, fmt.Errorf("policy %q: unknown field %q (want alg, limit, window, burst, name)", spec, k)
		}
		if err != nil {
			return nil, fmt.Errorf("policy %q: bad %s %q", spec, k, v)
		}
	}
	if algs == nil {
		return nil, fmt.Errorf("policy %q: alg is missing", spec)
	}
	out := make([]core.Policy, 0, len(algs))
	for _, a := range algs {
		q := p
		q.Algorithm = a
		if len(algs) > 1 && q.Name != "" {
			q.Name += "-" + strings.ReplaceAll(string(a), "_", "-")
		}
		if q.Name == "" {
			q.Name = strings.ReplaceAll(string(a), "_", "-")
		}
		if err := q.Validate(); err != nil {
			return nil, fmt.Errorf("policy %q: %w", spec, err)
		}
		out = append(out, q)
	}
	return out, nil
}
