// Command ratelimit tests rate limits before production.
//
// This main.go is a placeholder that dispatches `probe` only; the command's
// dispatcher lands with `simulate`.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to the subcommand named by args[0] and returns the exit
// code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: ratelimit probe [flags] URL")
		return 2
	}
	switch args[0] {
	case "probe":
		return runProbe(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, "usage: ratelimit probe [flags] URL\n\nRun 'ratelimit probe --help' for the flags.")
		return 0
	}
	fmt.Fprintf(stderr, "ratelimit: unknown command %q\n", args[0])
	return 2
}
