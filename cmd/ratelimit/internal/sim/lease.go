package sim

import (
	"context"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
)

// LeaseReport compares a fleet whose global layer is leased with the same
// fleet without leases: the figures of docs/leases.md. Counts are request
// units.
type LeaseReport struct {
	Policy   core.Policy // leased
	Options  FleetOptions
	Requests int64
	// Admitted is per second, without a death and with it.
	Admitted, AdmittedDeath []int64
	// WorstExcess is the most admitted beyond the policy, in either run:
	// for a window algorithm, in any of its windows beyond the Limit; for
	// a token bucket, in any interval [a, b] beyond Burst + rate*(b-a).
	// Bound is what the leases may add: 0 for a window algorithm, rate
	// times Lease for a token bucket.
	WorstExcess, Bound int64
	// Utilization is the share of what the policy allows that was
	// admitted, without a death: whole windows for a window algorithm,
	// the whole run for a token bucket.
	Utilization float64
	// Store operations on the global key per second: with leases (Take
	// and Refund, without a death), and without, measured over PlainFor
	// (every request one Take).
	Ops           []int64
	PlainOps      float64
	PlainRequests float64 // requests per second in the run without leases
	PlainFor      time.Duration
	// Taken and GivenBack are the leased run's (FleetResult's), without
	// a death.
	Taken, GivenBack int64
	// The death: Dead servers died holding Held units, of which
	// Unreturned were never admitted nor given back by the end; Lost is
	// what was admitted less than without the death (it moves the dead's
	// traffic, so other servers' shares change too).
	Dead                   int
	Held, Unreturned, Lost int64
}

// Leases runs opt's fleet three ways at once: leased without a death
// (opt.DieAt ignored), leased with it, and without leases for plainFor
// (at most opt.Duration).
func Leases(ctx context.Context, opt FleetOptions, plainFor time.Duration) (LeaseReport, error) {
	calm, plain := opt, opt
	calm.DieAt = 0
	plain.DieAt, plain.Policy.Lease = 0, 0
	plain.Duration = min(max(plainFor, time.Millisecond), opt.Duration)
	runs := []FleetOptions{calm, opt, plain}
	res := make([]FleetResult, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { res[i], errs[i] = RunFleet(ctx, runs[i]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return LeaseReport{}, err
		}
	}
	return report(opt, plain.Duration, res[0], res[1], res[2]), nil
}

// report compares the runs of Leases.
func report(opt FleetOptions, plainFor time.Duration, calm, death, plain FleetResult) LeaseReport {
	p := calm.Policy
	r := LeaseReport{Policy: p, Options: opt, Requests: calm.Requests,
		Admitted: perSecond(calm.PerMs), AdmittedDeath: perSecond(death.PerMs),
		Ops: calm.OpsPerSec, PlainFor: plainFor, Taken: calm.Taken, GivenBack: calm.GivenBack,
		Dead: death.Dead, Held: death.Held, Unreturned: death.Unreturned, Lost: calm.Admitted - death.Admitted}
	r.WorstExcess = max(excess(p, calm.PerMs), excess(p, death.PerMs))
	if p.Algorithm == core.TokenBucket {
		r.Bound = int64(float64(p.Limit) * float64(p.Lease) / float64(p.Window))
	}
	r.Utilization = utilization(p, calm.PerMs)
	secs := r.PlainFor.Seconds()
	r.PlainRequests = float64(plain.Requests) / secs
	var ops int64
	for _, n := range plain.OpsPerSec {
		ops += n
	}
	r.PlainOps = float64(ops) / secs
	return r
}

// LeasedOps is the mean of r.Ops.
func (r LeaseReport) LeasedOps() float64 {
	var n int64
	for _, o := range r.Ops {
		n += o
	}
	return float64(n) / r.Options.Duration.Seconds()
}

// perSecond sums perMs by the second.
func perSecond(perMs []int64) []int64 {
	out := make([]int64, (len(perMs)+999)/1000)
	for i, n := range perMs {
		out[i/1000] += n
	}
	return out
}

// windowsOf sums perMs by p's windows, which start at multiples of the
// Window from Epoch.
func windowsOf(p core.Policy, perMs []int64) []int64 {
	w := int(p.Window.Milliseconds())
	out := make([]int64, (len(perMs)+w-1)/w)
	for i, n := range perMs {
		out[i/w] += n
	}
	return out
}

// excess is the most perMs admitted beyond p (see LeaseReport.WorstExcess).
func excess(p core.Policy, perMs []int64) int64 {
	if p.Algorithm != core.TokenBucket {
		worst := int64(0)
		for _, n := range windowsOf(p, perMs) {
			worst = max(worst, n-p.Limit)
		}
		return worst
	}
	// The most of sum(perMs[i..j]) - rate*(j-i+1): prefix sums less the
	// rate, their greatest rise.
	rate := float64(p.Limit) / float64(p.Window.Milliseconds())
	var sum, low, worst float64 // low: the least prefix so far
	for i, n := range perMs {
		sum += float64(n)
		x := sum - rate*float64(i+1)
		worst = max(worst, x-low)
		low = min(low, x)
	}
	return max(0, int64(worst)-burstOf(p))
}

// burstOf is p's bucket capacity.
func burstOf(p core.Policy) int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// utilization is the share of what p allows that perMs admitted (see
// LeaseReport.Utilization).
func utilization(p core.Policy, perMs []int64) float64 {
	if p.Algorithm == core.TokenBucket {
		allowed := float64(burstOf(p)) + float64(p.Limit)*float64(len(perMs))/float64(p.Window.Milliseconds())
		var n int64
		for _, a := range perMs {
			n += a
		}
		return float64(n) / allowed
	}
	ws := windowsOf(p, perMs)
	whole := len(perMs) / int(p.Window.Milliseconds())
	if whole == 0 {
		return 0
	}
	var n int64
	for _, a := range ws[:whole] {
		n += a
	}
	return float64(n) / float64(int64(whole)*p.Limit)
}
