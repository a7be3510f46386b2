// Command ratelimit tests rate limits before production.
//
//	ratelimit simulate  replays traffic against policies with a virtual clock
//	ratelimit probe     sends a bounded stream of requests to a running server
//	ratelimit openapi   merges the limits into the API's OpenAPI document
//	ratelimit describe  writes a page of the limits, in Markdown
//
// Exit codes: 0 ok, 1 the check failed, 2 usage or input error.
package main

//go:generate go run . simulate --readme-plots ../../docs/img

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
)

// Exit codes a CI job can rely on.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

const usage = `Usage: ratelimit <command> [flags]

Commands:
  simulate   replay traffic (a file or a synthetic pattern) against policies
             on the memory store with a virtual clock, and report what passed
  probe      send a bounded, paced stream of requests to a server's URL and
             check that its rate-limit headers agree with what it does
  openapi    merge the limits of a layers file into the API's OpenAPI
             document (or write one of their own)
  describe   write a page, in Markdown, of the limits of each operation
  help       show this help, or "ratelimit help <command>"

Run "ratelimit <command> --help" for a command's flags and examples.
Exit codes: 0 ok, 1 the check failed, 2 usage or input error.
`

func main() {
	// The flows of describe and openapi are described, never served: the
	// warning keyfuncs.FirstOf logs when describing a key such as
	// user:<key>|ip falls back would tell of no program.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "simulate":
		if leasesAsked(args[1:]) {
			return runSimulateLeases(ctx, args[1:], stdout, stderr)
		}
		return runSimulate(ctx, args[1:], stdout, stderr)
	case "probe":
		return runProbe(ctx, args[1:], stdout, stderr)
	case "openapi":
		return runOpenAPI(args[1:], stdout, stderr)
	case "describe":
		return runDescribe(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			switch args[1] {
			case "simulate":
				return runSimulate(ctx, []string{"--help"}, stdout, stderr)
			case "probe":
				return runProbe(ctx, []string{"--help"}, stdout, stderr)
			case "openapi":
				return runOpenAPI([]string{"--help"}, stdout, stderr)
			case "describe":
				return runDescribe([]string{"--help"}, stdout, stderr)
			}
			fmt.Fprintf(stderr, "ratelimit: unknown command %q\n\n%s", args[1], usage)
			return exitUsage
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// printFlags writes fs's flags to w as flag.PrintDefaults does, but with
// two dashes, as the help texts write them (the flag package takes one or
// two). fs's output is left discarded, as the commands keep it.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if strings.HasPrefix(line, "  -") {
			line = "  --" + line[len("  -"):]
		}
		_, _ = io.WriteString(w, line)
	}
}
