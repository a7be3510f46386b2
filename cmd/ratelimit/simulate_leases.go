package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/layersfile"
	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/core"
)

const simulateLeasesHelp = `Usage: ratelimit simulate --leases [flags]

Simulates quota leases (Policy.Lease) at scale, in process on a virtual
clock: --servers Limiters (app servers) sharing one memory store decide
requests of one global key, with skewed traffic (--hot servers get
--hot-share of it, half the others the rest, the others none; the roles are
drawn again every --move). At --die-at, a fraction --die of the servers
stop being sent requests and die holding what they held. For each
algorithm it runs the fleet leased without the death, leased with it, and
without leases for --plain, and reports the admitted per second against the
limit, the worst excess over any window (window algorithms: beyond the
limit in a window; token bucket: beyond burst + rate*(b-a) in any [a, b],
the leases' bound being rate*lease), the share of the limit used, store
operations per second on the global key with leases and without, the units
the servers took from the store and gave back (asked to: a bucket gives back
only what has not drained since), and what the death cost: what the dead
held, and what was admitted less than without it. The guide:
docs/leases.md.

Example:
  ratelimit simulate --leases --plot-dir docs/img

Flags:
`

// leasesAsked reports whether args ask for simulate's leases mode.
func leasesAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-leases", "--leases", "-leases=true", "--leases=true":
			return true
		}
	}
	return false
}

// leaseFlags are simulate --leases's flags.
type leaseFlags struct {
	fleet   sim.FleetOptions
	algs    string
	limit   int64
	window  time.Duration
	lease   time.Duration
	burst   int64
	plain   time.Duration
	plotDir string
}

func (lf *leaseFlags) define(fs *flag.FlagSet) {
	fs.Bool("leases", true, "simulate quota leases at scale")
	fs.IntVar(&lf.fleet.Servers, "servers", 1000, "app servers (Limiters) sharing the store")
	fs.StringVar(&lf.algs, "alg", "fixed,counter,token", "algorithms, comma-separated: fixed, counter, token (the ones a lease can lease)")
	fs.Int64Var(&lf.limit, "limit", 10_000_000, "the global limit per window")
	fs.DurationVar(&lf.window, "window", time.Minute, "the global limit's window")
	fs.DurationVar(&lf.lease, "lease", 0, "the lease (default: window/120 for fixed and counter, window/100 for token)")
	fs.Int64Var(&lf.burst, "burst", 0, "the token bucket's burst (default: a second of its rate)")
	fs.Float64Var(&lf.fleet.Demand, "demand", 1.5, "traffic offered, a multiple of the limit's rate")
	fs.DurationVar(&lf.fleet.Duration, "duration", 2*time.Minute, "virtual time simulated")
	fs.IntVar(&lf.fleet.Hot, "hot", 10, "hot servers")
	fs.Float64Var(&lf.fleet.HotShare, "hot-share", 0.6, "the share of the traffic the hot servers get")
	fs.DurationVar(&lf.fleet.Move, "move", 15*time.Second, "how often the traffic moves (the roles are drawn again)")
	fs.DurationVar(&lf.fleet.DieAt, "die-at", 90*time.Second, "when servers die (0: never)")
	fs.Float64Var(&lf.fleet.Die, "die", 0.1, "the share of the servers that die")
	fs.Uint64Var(&lf.fleet.Seed, "seed", 1, "random seed")
	fs.DurationVar(&lf.plain, "plain", 10*time.Second, "virtual time simulated without leases (one store operation a request)")
	fs.StringVar(&lf.plotDir, "plot-dir", "", "write leases-admitted.svg and leases-store-ops.svg into this directory")
}

// policies are the leased policies of lf, one per algorithm.
func (lf *leaseFlags) policies() ([]core.Policy, error) {
	if lf.window < time.Millisecond || lf.limit < 1 {
		return nil, fmt.Errorf("--limit %d per --window %v: want a limit of at least 1 per at least 1ms", lf.limit, lf.window)
	}
	var out []core.Policy
	for name := range strings.SplitSeq(lf.algs, ",") {
		a, err := layersfile.Algorithm(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("--alg: %w", err)
		}
		p := core.Policy{Name: "global", Algorithm: a, Limit: lf.limit, Window: lf.window, Lease: lf.lease}
		if a == core.TokenBucket {
			p.Burst = lf.burst
			if p.Burst == 0 {
				p.Burst = max(1, int64(float64(lf.limit)*float64(time.Second)/float64(lf.window)))
			}
		}
		if p.Lease == 0 {
			p.Lease = max(time.Millisecond, lf.window/120)
			if a == core.TokenBucket {
				p.Lease = max(time.Millisecond, lf.window/100)
			}
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("--alg %s: %w", name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// runSimulateLeases is simulate --leases.
func runSimulateLeases(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate --leases", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var lf leaseFlags
	lf.define(fs)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, simulateLeasesHelp)
			printFlags(stdout, fs)
			return exitOK
		}
		fmt.Fprintln(stderr, `Run "ratelimit simulate --leases --help" for usage.`)
		return exitUsage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "simulate --leases: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	policies, err := lf.policies()
	if err != nil {
		return fail("%v", err)
	}
	if lf.fleet.DieAt >= lf.fleet.Duration {
		return fail("--die-at %v: want before the end of --duration %v (or 0: never)", lf.fleet.DieAt, lf.fleet.Duration)
	}
	if lf.plotDir != "" {
		if st, err := os.Stat(lf.plotDir); err != nil || !st.IsDir() {
			return fail("--plot-dir %s: not a directory", lf.plotDir)
		}
	}
	lf.fleet.Policy = policies[0]
	if err := lf.fleet.Check(); err != nil {
		return fail("%v", err)
	}
	reports := make([]sim.LeaseReport, 0, len(policies))
	walls := make([]time.Duration, 0, len(policies))
	for _, p := range policies {
		opt := lf.fleet
		opt.Policy = p
		begin := time.Now()
		r, err := sim.Leases(ctx, opt, lf.plain)
		if err != nil {
			return fail("%v", err)
		}
		reports = append(reports, r)
		walls = append(walls, time.Since(begin).Round(10*time.Millisecond))
	}
	writeLeaseTable(stdout, reports, walls)
	if lf.plotDir != "" {
		if err := sim.PlotLeases(reports, lf.plotDir); err != nil {
			return fail("%v", err)
		}
	}
	return exitOK
}

func writeLeaseTable(w io.Writer, reports []sim.LeaseReport, walls []time.Duration) {
	o := reports[0].Options
	fmt.Fprintf(w, "%d servers, demand %g times the limit, %v simulated; %d hot servers get %.0f%% of the traffic, moving every %v; %.0f%% of the servers die at %v\n\n",
		o.Servers, o.Demand, o.Duration, o.Hot, 100*o.HotShare, o.Move, 100*o.Die, o.DieAt)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\tlimit\tlease\trequests/s\tlimit/s\tadmitted/s\tworst excess\tbound\tlimit used\tstore ops/s leased\twithout\tfewer\ttaken\tgiven back\tdead held\tadmitted less\twall\t")
	for i, r := range reports {
		p := r.Policy
		secs := o.Duration.Seconds()
		var admitted int64
		for _, n := range r.Admitted {
			admitted += n
		}
		fmt.Fprintf(tw, "%s\t%d/%v\t%v\t%.0f\t%.0f\t%.0f\t%d\t%d\t%.2f%%\t%.0f\t%.0f\t%.0fx\t%d\t%d\t%d\t%d\t%v\t\n",
			p.Algorithm, p.Limit, p.Window, p.Lease, float64(r.Requests)/secs, float64(p.Limit)/p.Window.Seconds(),
			float64(admitted)/secs, r.WorstExcess, r.Bound, 100*r.Utilization, r.LeasedOps(), r.PlainOps,
			r.PlainOps/max(r.LeasedOps(), 1e-9), r.Taken, r.GivenBack, r.Held, r.Lost, walls[i])
	}
	tw.Flush()
}
