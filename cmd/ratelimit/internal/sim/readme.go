package sim

import (
	"context"
	"path/filepath"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// ReadmeTrace is the traffic of the README's figures, one client: a burst of
// 30 at 1 s, then 20 requests per second until 3 s (twice the limit); quiet;
// then an attacker at the fixed window's edge, 20 requests in the last 50 ms
// before 6 s and 20 in the first 50 ms after it.
func ReadmeTrace() []Event {
	var ev []Event
	add := func(at time.Duration) { ev = append(ev, Event{At: Epoch.Add(at), Key: "client", Cost: 1}) }
	for range 30 {
		add(time.Second)
	}
	for t := time.Second + 50*time.Millisecond; t < 3*time.Second; t += 50 * time.Millisecond {
		add(t)
	}
	for i := range 40 {
		add(6*time.Second - 50*time.Millisecond + time.Duration(i)*2500*time.Microsecond)
	}
	return ev
}

// ReadmePlots simulates ReadmeTrace under the five algorithms at 10 requests
// per second and writes dir/algorithms.svg and dir/algorithms.png.
func ReadmePlots(ctx context.Context, dir string) error {
	var policies []core.Policy
	for _, a := range limits.Algorithms[core.Algorithm]() {
		policies = append(policies, core.Policy{Name: "readme", Algorithm: a, Limit: 10, Window: time.Second})
	}
	res, err := Run(ctx, policies, ReadmeTrace(), Options{Bucket: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	for _, ext := range []string{".svg", ".png"} {
		if err := Plot(res, "The same traffic under the five algorithms (ratelimit simulate --readme-plots)", filepath.Join(dir, "algorithms"+ext)); err != nil {
			return err
		}
	}
	return nil
}
