package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/layersfile"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/openapi"
)

const openapiUsage = `Usage: ratelimit openapi --layers layers.yaml [--spec openapi.yaml] [--out file]

Writes the API's OpenAPI document with the limits of the layers merged in:
each operation the layers apply to gets an x-ratelimit extension (its
limits, their cost and key) and its 429 response (403 with a deny list,
503 when a layer fails closed), with their header fields and bodies as
components; the quota endpoint is added as a path. Nothing of the spec is
lost, and it is written in its own format (YAML or JSON). Without --spec, a
new OpenAPI 3.1 document of the layers' routes is written, in YAML.

The layers file (YAML or JSON) says what the Go program gives
httplimit.New; docs/command.md describes it.

Exit status: 0 written, 2 bad flags, layers or spec.

Examples:

  ratelimit openapi --layers layers.yaml --spec openapi.yaml --out openapi.limits.yaml
  ratelimit openapi --layers layers.json

Flags:
`

const describeUsage = `Usage: ratelimit describe --layers layers.yaml [--spec openapi.yaml] [--out file]

Writes a page of the limits of the layers, in Markdown: a table per
operation of the spec (or per layer route, without --spec) of the limits
that apply to it, and what a client over one is answered. The layers
file (YAML or JSON) is described in docs/command.md.

Exit status: 0 written, 2 bad flags, layers or spec.

Examples:

  ratelimit describe --layers layers.yaml --spec openapi.yaml --out docs/limits.md

Flags:
`

// runOpenAPI is `ratelimit openapi`.
func runOpenAPI(args []string, stdout, stderr io.Writer) int {
	return runDescriber("openapi", openapiUsage, openapi.Describe, args, stdout, stderr)
}

// runDescribe is `ratelimit describe`.
func runDescribe(args []string, stdout, stderr io.Writer) int {
	return runDescriber("describe", describeUsage, openapi.Markdown, args, stdout, stderr)
}

// runDescriber runs the command name, which writes what describe makes of
// a flow of the layers file and the spec.
func runDescriber(name, help string, describe func(*httplimit.Flow, []byte) ([]byte, error), args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	layersPath := fs.String("layers", "", "the layers `file`, YAML or JSON (required)")
	specPath := fs.String("spec", "", "the API's OpenAPI 3.0 or 3.1 `file`, YAML or JSON")
	outPath := fs.String("out", "", "write to `file` instead of standard output")
	fail := func(err error) int {
		fmt.Fprintf(stderr, "ratelimit %s: %v\nRun 'ratelimit %s --help' for usage.\n", name, err, name)
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			printFlags(stdout, fs)
			return exitOK
		}
		return fail(err)
	}
	switch {
	case fs.NArg() > 0:
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	case *layersPath == "":
		return fail(errors.New("no --layers file given"))
	}
	flow, err := loadFlow(*layersPath)
	if err != nil {
		return fail(err)
	}
	var spec []byte
	if *specPath != "" {
		if spec, err = os.ReadFile(*specPath); err != nil {
			return fail(err)
		}
	}
	out, err := describe(flow, spec)
	if err != nil {
		if *specPath != "" {
			err = fmt.Errorf("%s: %w", *specPath, err)
		}
		return fail(err)
	}
	if *outPath != "" {
		if err := os.WriteFile(*outPath, out, 0o644); err != nil {
			return fail(err)
		}
		return exitOK
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "ratelimit %s: %v\n", name, err)
		return exitFailed
	}
	return exitOK
}

// loadFlow returns the Flow of the layers file at path, over a memory
// store.
func loadFlow(path string) (*httplimit.Flow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	flow, err := layersfile.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return flow, nil
}
