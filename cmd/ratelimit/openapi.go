package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
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
httplimit.New; docs/openapi.md describes it.

Exit status: 0 written, 2 bad flags, layers or spec.

Examples:

  ratelimit openapi --layers layers.yaml --spec openapi.yaml --out openapi.limits.yaml
  ratelimit openapi --layers layers.json

Flags:
`

const describeUsage = `Usage: ratelimit describe --layers layers.yaml [--spec openapi.yaml] [--out file]

Writes a page of the limits of the layers, in Markdown: a table per
operation of the spec (or per layer route, without --spec) of the limits
that apply to it, and what a client over one is answered.

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

// layersFile is what the layers file holds: the layers of a Flow and the
// options that change what clients are told.
type layersFile struct {
	Layers []layerSpec `yaml:"layers"`
	// Headers are the families of fields written: x-ratelimit, draft6,
	// structured, retry-after; absent, x-ratelimit, draft6, retry-after.
	Headers        []string `yaml:"headers"`
	ProblemDetails bool     `yaml:"problem_details"`
	Quota          string   `yaml:"quota"`
	Deny           []string `yaml:"deny"`
}

// layerSpec is one layer of the layers file.
type layerSpec struct {
	Name       string           `yaml:"name"`
	Algorithm  string           `yaml:"algorithm"`
	Limit      int64            `yaml:"limit"`
	Window     string           `yaml:"window"`
	Burst      int64            `yaml:"burst"`
	Lockout    string           `yaml:"lockout"`
	FailClosed string           `yaml:"fail_closed"`
	Methods    []string         `yaml:"methods"`
	Routes     []string         `yaml:"routes"`
	Costs      map[string]int64 `yaml:"costs"`
	Key        string           `yaml:"key"`
}

// loadFlow returns the Flow of the layers file at path, over a memory
// store.
func loadFlow(path string) (*httplimit.Flow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	flow, err := parseFlow(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return flow, nil
}

// parseFlow returns the Flow of a layers file.
func parseFlow(data []byte) (*httplimit.Flow, error) {
	var f layersFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty layers file")
		}
		return nil, err
	}
	if len(f.Layers) == 0 {
		return nil, errors.New("no layers")
	}
	var layers []httplimit.Layer
	for i, ls := range f.Layers {
		ly, err := ls.layer()
		if err != nil {
			return nil, fmt.Errorf("layers[%d] %q: %w", i, ls.Name, err)
		}
		layers = append(layers, ly)
	}
	var opts []httplimit.Option
	if f.Headers != nil {
		var cfg headers.Config
		for _, h := range f.Headers {
			switch strings.ToLower(h) {
			case "x-ratelimit":
				cfg.XRateLimit = true
			case "draft6":
				cfg.Draft6 = true
			case "structured":
				cfg.Structured = true
			case "retry-after":
				cfg.RetryAfter = true
			default:
				return nil, fmt.Errorf("headers: unknown family %q (x-ratelimit, draft6, structured, retry-after)", h)
			}
		}
		opts = append(opts, httplimit.WithHeaders(cfg))
	}
	if f.ProblemDetails {
		opts = append(opts, httplimit.WithProblemDetails())
	}
	if f.Quota != "" {
		opts = append(opts, httplimit.WithQuota(f.Quota))
	}
	if len(f.Deny) > 0 {
		var entries []access.Entry
		for _, s := range f.Deny {
			e, err := access.ParseEntry(s)
			if err != nil {
				return nil, fmt.Errorf("deny: %w", err)
			}
			entries = append(entries, e)
		}
		list, err := access.NewList(entries...)
		if err != nil {
			return nil, fmt.Errorf("deny: %w", err)
		}
		ip, err := keyfuncs.NewClientIP()
		if err != nil {
			return nil, err
		}
		opts = append(opts, httplimit.WithDenyList(list), httplimit.WithClientIP(ip))
	}
	// The memory store's janitor ends when the process does: the command
	// describes the Flow and exits.
	store, err := memstore.New()
	if err != nil {
		return nil, err
	}
	return httplimit.New(store, layers, opts...)
}

// layer returns the httplimit.Layer of ls.
func (ls layerSpec) layer() (httplimit.Layer, error) {
	p := core.Policy{Name: ls.Name, Algorithm: core.Algorithm(ls.Algorithm), Limit: ls.Limit, Burst: ls.Burst}
	for _, d := range []struct {
		field string
		text  string
		to    *time.Duration
	}{{"window", ls.Window, &p.Window}, {"lockout", ls.Lockout, &p.Lockout}, {"fail_closed", ls.FailClosed, &p.FailClosed}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return httplimit.Layer{}, fmt.Errorf("%s: %w", d.field, err)
		}
		*d.to = v
	}
	if err := p.Validate(); err != nil {
		return httplimit.Layer{}, err
	}
	ly := httplimit.Layer{Policy: p, Methods: ls.Methods, Routes: ls.Routes}
	if len(ls.Costs) > 0 {
		cost, err := httplimit.CostByRoute(ls.Costs)
		if err != nil {
			return httplimit.Layer{}, fmt.Errorf("costs: %w", err)
		}
		ly.Cost = cost
	}
	var err error
	switch kind, arg, _ := strings.Cut(ls.Key, ":"); {
	case ls.Key == "" || ls.Key == "ip":
	case ls.Key == "static":
		ly.Key, err = keyfuncs.Static(ls.Name)
	case kind == "header" && arg != "":
		ly.Key, err = keyfuncs.APIKeyHeader(arg, nil)
	default:
		err = fmt.Errorf("key %q: want ip, static or header:<Name>", ls.Key)
	}
	return ly, err
}
