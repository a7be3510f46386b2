package sim

import (
	"fmt"
	"strings"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/layersfile"
	"github.com/apigate/ratelimit/core"
)

// ParsePolicy reads "alg=token,limit=100,window=1m[,burst=20][,name=api]",
// each field as a layers file's (layersfile.SetPolicyField: lockout,
// lockout_max, lockout_memory and fail_closed too). alg (or algorithm) is
// an algorithm's name (token_bucket ...), a short name (fixed, log,
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
		if k == "alg" {
			k = "algorithm"
		}
		if seen[k] {
			return nil, fmt.Errorf("policy %q: %s given twice", spec, k)
		}
		seen[k] = true
		if k == "algorithm" && v == "all" {
			algs = layersfile.Algorithms()
			continue
		}
		if err := layersfile.SetPolicyField(&p, k, v); err != nil {
			if k == "algorithm" {
				err = fmt.Errorf("%w, or all", err)
			}
			return nil, fmt.Errorf("policy %q: %w", spec, err)
		}
		if k == "algorithm" {
			algs = []core.Algorithm{p.Algorithm}
		}
	}
	if algs == nil {
		_, err := layersfile.Algorithm("")
		return nil, fmt.Errorf("policy %q: alg: %w, or all", spec, err)
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
