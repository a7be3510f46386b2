package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/core"
)

const simulateHelp = `Usage: ratelimit simulate --policy SPEC [--policy SPEC ...] (--trace FILE | --pattern NAME) [flags]

Replays traffic against each policy independently, on the memory store with a
virtual clock (an hour of traffic runs in seconds), and reports per policy the
request units admitted and denied, the most admitted in any sliding window of
length W by one key, when denials started, and the keys most denied, each
with the same counts and its own first denial.

Policy SPEC: alg=ALG,limit=N,window=DUR[,burst=N][,name=NAME][,lockout=DUR]
  ALG is fixed, log, counter, token, leaky (or the full names fixed_window,
  sliding_window_log, sliding_window_counter, token_bucket, leaky_bucket), or
  all for one policy per algorithm. The fields are a layers file's policy
  fields (lockout_max, lockout_memory and fail_closed too; docs/command.md),
  read by the same code.

Trace files (--trace): CSV "timestamp,key[,cost]" (.csv; a header row
first is skipped) or JSON Lines
{"t":...,"key":"...","cost":N} (.jsonl, .ndjson); --format overrides the
extension. A timestamp is RFC 3339, or seconds after the virtual epoch
(2030-01-01T00:00:00Z, aligned to every window) such as 1.25, or
milliseconds such as 1250ms. Times must not go back. A bad line is an error
naming its line and column (exit 2).

Patterns (--pattern):
  steady  one client at --rate requests per second
  burst   --burst requests at once every --period
  edge    an attacker sending --burst requests in the last 5% of each
          --period and --burst more in the first 5% of the next
  many    --clients clients, --rate requests per second each, random
          arrivals (deterministic for a --seed)

Examples:
  ratelimit simulate --policy alg=all,limit=10,window=1s --pattern edge --burst 10 --period 1s --duration 10s
  ratelimit simulate --policy alg=token,limit=100,window=1m,burst=20 --trace access.csv --top 5
  ratelimit simulate --policy alg=all,limit=10,window=1s --pattern burst --burst 30 --period 5s --plot burst.png
  ratelimit simulate --readme-plots docs/img   # regenerate the README's figures
  ratelimit simulate --policy alg=fixed,limit=60,window=1m --pattern many --clients 10000 --rate 0.02778 --duration 1h --json
  ratelimit simulate --leases --plot-dir docs/img   # quota leases at scale: see "simulate --leases --help"

Flags:
`

// runSimulate is the simulate subcommand.
func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var specs []string
	fs.Func("policy", "a policy SPEC (repeatable)", func(s string) error { specs = append(specs, s); return nil })
	trace := fs.String("trace", "", "trace file (CSV or JSON Lines)")
	format := fs.String("format", "", "trace format: csv or jsonl (default: by extension)")
	pattern := fs.String("pattern", "", "synthetic pattern: steady, burst, edge, many")
	duration := fs.Duration("duration", time.Minute, "length of a synthetic trace")
	rate := fs.Float64("rate", 10, "requests per second (steady; per client for many)")
	burst := fs.Int("burst", 10, "requests per burst (burst, edge)")
	period := fs.Duration("period", time.Second, "time between bursts (burst); window length (edge)")
	clients := fs.Int("clients", 100, "number of clients (many)")
	seed := fs.Uint64("seed", 1, "random seed (many)")
	window := fs.Duration("window", 0, "W of the worst-case sliding window (default: each policy's window)")
	top := fs.Int("top", 5, "keys to list per policy")
	asJSON := fs.Bool("json", false, "print JSON instead of a table (snake_case keys, durations in seconds, null for never)")
	plotPath := fs.String("plot", "", "draw offered and admitted requests over time to this .svg or .png file")
	bucket := fs.Duration("bucket", 0, "time step of the plot (default: the trace's length / 200)")
	readme := fs.String("readme-plots", "", "write the README's figures (algorithms.svg, .png) into this directory and exit")
	fs.Usage = func() {} // the error alone; the whole help only on --help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, simulateHelp)
			printFlags(stdout, fs)
			return exitOK
		}
		fmt.Fprintln(stderr, `Run "ratelimit simulate --help" for usage.`)
		return exitUsage
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "simulate: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if *readme != "" {
		if err := sim.ReadmePlots(ctx, *readme); err != nil {
			return fail("%v", err)
		}
		return exitOK
	}
	if len(specs) == 0 {
		return fail("at least one --policy is needed (see --help)")
	}
	var policies []core.Policy
	for _, s := range specs {
		ps, err := sim.ParsePolicy(s)
		if err != nil {
			return fail("%v", err)
		}
		policies = append(policies, ps...)
	}
	if (*trace == "") == (*pattern == "") {
		return fail("give exactly one of --trace and --pattern")
	}
	if *top < 0 || *window < 0 {
		return fail("--top and --window must not be negative")
	}
	var events []sim.Event
	var err error
	if *trace != "" {
		events, err = readTrace(*trace, *format)
	} else {
		events, err = sim.Generate(sim.Pattern{Name: *pattern, Duration: *duration, Rate: *rate,
			Burst: *burst, Period: *period, Clients: *clients, Seed: *seed})
	}
	if err != nil {
		return fail("%v", err)
	}
	if *bucket < 0 {
		return fail("--bucket must not be negative")
	}
	if ext := strings.ToLower(filepath.Ext(*plotPath)); *plotPath != "" && ext != ".svg" && ext != ".png" {
		return fail("--plot %s: want a .svg or .png file", *plotPath)
	}
	opt := sim.Options{Window: *window, TopKeys: *top, Progress: progress(stderr, time.Now)}
	if *plotPath != "" && len(events) > 0 {
		opt.Bucket = *bucket
		if opt.Bucket == 0 {
			opt.Bucket = max(events[len(events)-1].At.Sub(events[0].At)/200, time.Millisecond)
		}
	}
	results, err := sim.Run(ctx, policies, events, opt)
	if err != nil {
		return fail("%v", err)
	}
	if opt.Bucket > 0 {
		if err := sim.Plot(results, "", *plotPath); err != nil {
			return fail("%v", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonResults(results)); err != nil {
			return fail("%v", err)
		}
		return exitOK
	}
	writeTable(stdout, results, len(events))
	return exitOK
}

// progress reports on stderr once a run has lasted two seconds, then every
// second, by the clock now.
func progress(stderr io.Writer, now func() time.Time) func(string, int, int) {
	begin := now()
	last := begin
	return func(policy string, done, total int) {
		now := now()
		if now.Sub(begin) < 2*time.Second || now.Sub(last) < time.Second {
			return
		}
		last = now
		fmt.Fprintf(stderr, "simulate: %s: %d/%d requests (%.0f%%)\n", policy, done, total, 100*float64(done)/float64(max(total, 1)))
	}
}

func readTrace(path, format string) ([]sim.Event, error) {
	if format == "" {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".csv":
			format = "csv"
		case ".jsonl", ".ndjson":
			format = "jsonl"
		default:
			return nil, fmt.Errorf("%s: cannot tell the format from the extension: use --format csv or jsonl", path)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []sim.Event
	switch format {
	case "csv":
		events, err = sim.ParseCSV(f)
	case "jsonl":
		events, err = sim.ParseJSONL(f)
	default:
		return nil, fmt.Errorf("unknown --format %q (want csv or jsonl)", format)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return events, nil
}

func writeTable(w io.Writer, results []sim.Result, requests int) {
	fmt.Fprintf(w, "%d requests replayed\n\n", requests)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\talgorithm\tlimit/window\toffered\tadmitted\tdenied\tworst in W\tW\tfirst denial\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d/%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.Policy.Name, r.Policy.Algorithm,
			r.Policy.Limit, r.Policy.Window, r.Offered, r.Admitted, r.Denied, r.Worst, r.WorstWindow, offset(r.FirstDenial))
	}
	tw.Flush()
	for _, r := range results {
		if len(r.Keys) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: top %d keys\n", r.Policy.Name, len(r.Keys))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "key\tadmitted\tdenied\tworst in W\tfirst denial\t")
		for _, k := range r.Keys {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t\n", k.Key, k.Admitted, k.Denied, k.Worst, offset(k.FirstDenial))
		}
		tw.Flush()
	}
}

// offset formats a first denial: its offset from the trace's epoch, or "-"
// when there was none.
func offset(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.String()
}

// The --json report: keys in snake_case, durations in seconds (a float,
// named *_seconds), and null for "never" (no denial).
type (
	jsonPolicy struct {
		Name          string  `json:"name"`
		Algorithm     string  `json:"algorithm"`
		Limit         int64   `json:"limit"`
		WindowSeconds float64 `json:"window_seconds"`
		Burst         int64   `json:"burst,omitempty"`
	}
	jsonKey struct {
		Key                string   `json:"key"`
		Admitted           int64    `json:"admitted"`
		Denied             int64    `json:"denied"`
		Worst              int64    `json:"worst"`
		FirstDenialSeconds *float64 `json:"first_denial_seconds"`
	}
	jsonPoint struct {
		AtSeconds float64 `json:"at_seconds"`
		Offered   int64   `json:"offered"`
		Admitted  int64   `json:"admitted"`
	}
	jsonResult struct {
		Policy             jsonPolicy  `json:"policy"`
		Offered            int64       `json:"offered"`
		Admitted           int64       `json:"admitted"`
		Denied             int64       `json:"denied"`
		Worst              int64       `json:"worst"`
		WorstWindowSeconds float64     `json:"worst_window_seconds"`
		FirstDenialSeconds *float64    `json:"first_denial_seconds"`
		Keys               []jsonKey   `json:"keys,omitempty"`
		Series             []jsonPoint `json:"series,omitempty"`
	}
)

// jsonResults is results as --json writes them.
func jsonResults(results []sim.Result) []jsonResult {
	out := make([]jsonResult, len(results))
	for i, r := range results {
		p := r.Policy
		jr := jsonResult{
			Policy:  jsonPolicy{Name: p.Name, Algorithm: string(p.Algorithm), Limit: p.Limit, WindowSeconds: p.Window.Seconds(), Burst: p.Burst},
			Offered: r.Offered, Admitted: r.Admitted, Denied: r.Denied, Worst: r.Worst,
			WorstWindowSeconds: r.WorstWindow.Seconds(), FirstDenialSeconds: seconds(r.FirstDenial),
		}
		for _, k := range r.Keys {
			jr.Keys = append(jr.Keys, jsonKey{Key: k.Key, Admitted: k.Admitted, Denied: k.Denied, Worst: k.Worst, FirstDenialSeconds: seconds(k.FirstDenial)})
		}
		for _, pt := range r.Series {
			jr.Series = append(jr.Series, jsonPoint{AtSeconds: pt.At.Seconds(), Offered: pt.Offered, Admitted: pt.Admitted})
		}
		out[i] = jr
	}
	return out
}

// seconds is d in seconds, nil for a negative d (never).
func seconds(d time.Duration) *float64 {
	if d < 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}
