// Command compare runs the comparison benchmarks of this module (go test
// -bench in the module's root) and prints Markdown tables: a row per
// case, a column per library, the ratio of ours to the best peer, and the
// machine they ran on.
//
// Run it from the bench module:
//
//	go run ./cmd/compare                      # everything, -benchtime=1s
//	go run ./cmd/compare -quick               # -benchtime=100ms
//	go run ./cmd/compare -section redis,memory -count 3
//	go run ./cmd/compare -in saved.txt        # format saved go test output
//	go run ./cmd/compare -readme README.md    # also put the tables in README.md
//
// The go test output is copied to standard error as it comes (and to -raw
// FILE if given); the tables go to standard output.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// modulePath is the module whose benchmarks compare runs.
const modulePath = "github.com/apigate/ratelimit/bench"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	sections  []string
	benchtime string
	count     int
	in, raw   string
	readme    string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	section := fs.String("section", "all", "sections to run, comma-separated: redis, memory, middleware, or all")
	quick := fs.Bool("quick", false, "a quick run: -benchtime=100ms (noisier; for checking, not for publishing)")
	benchtime := fs.String("benchtime", "1s", "go test -benchtime")
	count := fs.Int("count", 1, "go test -count; the tables show each metric's median")
	in := fs.String("in", "", "format this file of go test -bench output instead of running the benchmarks")
	raw := fs.String("raw", "", "also write the go test output to this file")
	readme := fs.String("readme", "", "also put the tables in this file, between the lines "+beginMarker+" and "+endMarker)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("compare: unexpected arguments %q", fs.Args())
	}
	o := options{benchtime: *benchtime, count: *count, in: *in, raw: *raw, readme: *readme}
	if *quick {
		o.benchtime = "100ms"
	}
	if o.count < 1 {
		return options{}, fmt.Errorf("compare: -count %d: must be at least 1", o.count)
	}
	for s := range strings.SplitSeq(*section, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "all":
			o.sections = append(o.sections, sectionNames...)
		case "redis", "memory", "middleware":
			o.sections = append(o.sections, s)
		default:
			return options{}, fmt.Errorf("compare: -section %q: want redis, memory, middleware or all", s)
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var output []byte
	var m machine
	if o.in != "" {
		output, err = os.ReadFile(o.in)
		if err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		m = machineFromOutput(output)
	} else {
		dir, err := moduleDir(ctx)
		if err != nil {
			return err
		}
		m = describeMachine(ctx, dir)
		output, err = runBenchmarks(ctx, dir, o, stderr)
		if err != nil {
			return err
		}
		if o.raw != "" {
			if err := os.WriteFile(o.raw, output, 0o644); err != nil {
				return fmt.Errorf("compare: %w", err)
			}
		}
	}
	rs, err := parse(bytes.NewReader(output))
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return errors.New("compare: the output holds no benchmark result")
	}
	m.benchtime, m.count = o.benchtime, o.count
	if o.in != "" {
		m.benchtime = ""
	}
	var tables bytes.Buffer
	m.render(&tables)
	for _, s := range o.sections {
		for _, t := range sections[s] {
			t.render(&tables, rs)
		}
	}
	if _, err := stdout.Write(tables.Bytes()); err != nil {
		return err
	}
	if o.readme != "" {
		return spliceFile(o.readme, tables.Bytes())
	}
	return nil
}

// The lines between which -readme puts the tables.
const (
	beginMarker = "<!-- tables:begin -->"
	endMarker   = "<!-- tables:end -->"
)

// spliceFile replaces what lies between beginMarker and endMarker in the
// file at path with tables.
func spliceFile(path string, tables []byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	out, err := splice(b, tables)
	if err != nil {
		return fmt.Errorf("compare: %s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// splice returns doc with the text between its markers replaced by
// tables.
func splice(doc, tables []byte) ([]byte, error) {
	i := bytes.Index(doc, []byte(beginMarker+"\n"))
	j := bytes.Index(doc, []byte(endMarker))
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %s line followed by %s", beginMarker, endMarker)
	}
	i += len(beginMarker) + 1
	var out bytes.Buffer
	out.Write(doc[:i])
	out.Write(tables)
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// moduleDir returns the root of the bench module, checking that compare
// runs inside it.
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("compare: go list -m: %w (run compare from the bench module: cd bench && go run ./cmd/compare)", err)
	}
	path, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if path != modulePath {
		return "", fmt.Errorf("compare: run from the bench module (cd bench && go run ./cmd/compare), not %s", path)
	}
	return dir, nil
}

// runBenchmarks runs go test -bench for o's sections in dir, copying the
// output to stderr as it comes, and returns it.
func runBenchmarks(ctx context.Context, dir string, o options, stderr io.Writer) ([]byte, error) {
	var pattern []string
	for _, s := range o.sections {
		pattern = append(pattern, sectionBenchmarks[s]...)
	}
	args := []string{"test", "-run", "^$", "-bench", "^(" + strings.Join(pattern, "|") + ")$",
		"-benchtime", o.benchtime, "-count", fmt.Sprint(o.count), "-timeout", "60m", "."}
	fmt.Fprintf(stderr, "compare: go %s\n", strings.Join(args, " "))
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Stdout = io.MultiWriter(&out, stderr)
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("compare: go test: %w", err)
	}
	return out.Bytes(), nil
}
