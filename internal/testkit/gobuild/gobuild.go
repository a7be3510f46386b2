// Package gobuild builds programs of this module for the tests that run
// them as processes (the examples, probed or signalled as a user would).
//
// A test binary built with -race builds them with -race too. Built
// otherwise, a program would need every package it imports compiled a
// second time, without the race detector, which nothing else in a
// `go test -race ./...` run needs: on a cold build cache that is minutes of
// a busy CI machine (gin, echo, fiber and their dependencies), where with
// -race they are the very packages the run has compiled for its own tests,
// and only the programs are left to link.
package gobuild

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// buildTimeout bounds one go build: generous, for a cold cache on a busy
// machine.
const buildTimeout = 5 * time.Minute

// Flags returns the flags Build adds to go build: -race when this binary
// was built with the race detector, none otherwise.
func Flags() []string {
	if raceEnabled {
		return []string{"-race"}
	}
	return nil
}

// Tool returns the path of the go command, for a test that runs it. It
// skips tb when there is no go command in PATH, and, under -short, when
// slow says what slow thing the test does with it ("builds and runs the
// example"); slow is "" for a test quick enough to run under -short too.
func Tool(tb testing.TB, slow string) string {
	tb.Helper()
	if slow != "" && testing.Short() {
		tb.Skip(slow)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go tool in PATH")
	}
	return goTool
}

// Build runs `go build -o out pkgs...` in dir, with Flags, and fails tb
// with the command's output if it fails. out is a file, or a directory
// when it ends with a path separator, as for go build -o. It skips tb when
// there is no go command in PATH (Tool).
func Build(tb testing.TB, dir, out string, pkgs ...string) {
	tb.Helper()
	goTool := Tool(tb, "")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	args := append(append([]string{"build"}, Flags()...), "-o", out)
	cmd := exec.CommandContext(ctx, goTool, append(args, pkgs...)...)
	cmd.Dir = dir
	start := time.Now()
	built, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("go %v: %v\n%s", cmd.Args[1:], err, built)
	}
	tb.Logf("go %v: %v", cmd.Args[1:], time.Since(start).Round(time.Millisecond))
}
