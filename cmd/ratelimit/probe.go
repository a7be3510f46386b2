package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/probe"
)

const probeUsage = `Usage: ratelimit probe [flags] URL

Sends a bounded, evenly paced stream of requests to URL, and only to URL
(redirects are not followed), then reports when 429s began, the count of
each status, latency percentiles, and whether the rate-limit fields
(X-RateLimit-*, RateLimit-* of draft 6, RateLimit and RateLimit-Policy of
draft 10, Retry-After) agree with what the server did:

  429-with-quota-left       a 429 after a response said quota was left
  retry-after-too-short     the last 429's Retry-After was waited out
                            (at most --max-wait), and the retry got 429
  remaining-not-decreasing  Remaining did not go down as requests passed
  429-without-retry-info    a 429 with no Retry-After and no reset field
  malformed-headers         a rate-limit field that cannot be read

Exit status: 0 the fields agree, 1 they disagree, 2 bad flags or URL, no
response at all, or interrupted.

Hard caps: %d requests, %v, %g requests a second, %d in flight.

Examples:

  # 30 requests, 20 a second, to the demo API (go run ./examples/chi)
  ratelimit probe --rate 20 --requests 30 http://127.0.0.1:8080/

  # 10 seconds at 5 a second, with an API key, as JSON
  ratelimit probe --rate 5 --duration 10s --header 'X-API-Key: k' --json \
      http://127.0.0.1:8080/api/data

Flags:
`

// headerFlag collects repeated --header "Name: value" flags.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" }

func (f *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("want \"Name: value\", got %q", s)
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("header %q: a value cannot hold a line break", name)
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// runProbe is `ratelimit probe`. It returns the exit code: 0 when the
// rate-limit fields agree with what happened, 1 when they disagree, 2 for
// bad flags or URL, no response at all, or an interrupted run.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := probe.Config{Header: http.Header{}}
	fs.Float64Var(&cfg.Rate, "rate", 10, "requests per second, evenly spaced")
	fs.IntVar(&cfg.Requests, "requests", 0, "requests to send (default: as many as --rate and --duration give)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to send for (default 5s when --requests is not set)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "most requests in flight at once")
	fs.StringVar(&cfg.Method, "method", http.MethodGet, "request method (requests have no body)")
	fs.Var(&headerFlag{cfg.Header}, "header", "request header `Name: value`, repeatable")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "timeout of each request")
	fs.DurationVar(&cfg.RetryWait, "max-wait", 10*time.Second, "longest Retry-After to wait out to check it (0: no check)")
	asJSON := fs.Bool("json", false, "write the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, probeUsage, probe.MaxRequests, probe.MaxDuration, probe.MaxRate, probe.MaxConcurrency)
		printFlags(w, fs)
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "ratelimit probe: %v\nRun 'ratelimit probe --help' for usage.\n", err)
		return 2
	}

	// Flags may come before or after the URL.
	var urls []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage(stdout)
				return 0
			}
			return fail(err)
		}
		if fs.NArg() == 0 {
			break
		}
		urls = append(urls, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch len(urls) {
	case 0:
		return fail(errors.New("no URL given"))
	case 1:
		cfg.URL = urls[0]
	default:
		return fail(fmt.Errorf("one URL only, got %d: %s", len(urls), strings.Join(urls, " ")))
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return fail(errors.New(strings.TrimPrefix(err.Error(), probe.ErrInvalidConfig.Error()+": ")))
	}
	if !*quiet {
		cfg.Progress = func(p probe.Progress) {
			if p.Waiting > 0 {
				fmt.Fprintf(stderr, "probe: waiting %v, as the last 429's Retry-After said, to send it once more\n", p.Waiting.Round(time.Millisecond))
				return
			}
			if p.Elapsed < 2*time.Second {
				return // short runs need no progress
			}
			fmt.Fprintf(stderr, "probe: %d/%d answered, %d with 429, %d without a response, %v\n",
				p.Done-p.Failed, p.Total, p.Denied, p.Failed, p.Elapsed.Round(100*time.Millisecond))
		}
	}

	rep, err := probe.Run(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "ratelimit probe: %v\n", err)
			return 2
		}
	} else {
		rep.WriteText(stdout)
	}
	switch {
	case rep.Failed():
		return 1
	case rep.Interrupted:
		fmt.Fprintln(stderr, "ratelimit probe: interrupted")
		return 2
	case rep.Requests > 0 && rep.Errors == rep.Requests:
		fmt.Fprintf(stderr, "ratelimit probe: no response from %s: %s\n", cfg.URL, rep.FirstError)
		return 2
	}
	return 0
}
