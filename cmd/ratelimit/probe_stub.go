package main

import (
	"context"
	"fmt"
	"io"
)

// runProbe is a placeholder until the probe branch is merged (the lead
// deletes this file then).
func runProbe(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "probe: not built yet")
	return exitUsage
}
