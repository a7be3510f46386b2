package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is one benchmark's metrics by unit ("ns/op", "allocs/op",
// "decisions/s", ...), the median over its runs when -count > 1.
type result map[string]float64

// results holds the parsed benchmarks by top-level benchmark ("Redis"),
// case ("hot-key-1g") and library ("ours").
type results map[string]map[string]map[string]result

// get returns the metric of bench/case/lib and whether it was measured.
func (r results) get(bench, kase, lib, unit string) (float64, bool) {
	v, ok := r[bench][kase][lib][unit]
	return v, ok
}

// procSuffix is the -GOMAXPROCS suffix go test appends to a name.
var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads the standard output of go test -bench. Lines that are not
// results of Benchmark<Name>/<case>/<lib> are ignored; the runs of one
// name (-count) are reduced to the median of each metric.
func parse(r io.Reader) (results, error) {
	runs := map[[3]string]map[string][]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		parts := strings.Split(procSuffix.ReplaceAllString(f[0], ""), "/")
		if len(parts) != 3 {
			continue
		}
		key := [3]string{strings.TrimPrefix(parts[0], "Benchmark"), parts[1], parts[2]}
		m := runs[key]
		if m == nil {
			m = map[string][]float64{}
			runs[key] = m
		}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("compare: %s: metric %q: %w", f[0], f[i+1], err)
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("compare: reading benchmark output: %w", err)
	}
	out := results{}
	for key, m := range runs {
		if out[key[0]] == nil {
			out[key[0]] = map[string]map[string]result{}
		}
		if out[key[0]][key[1]] == nil {
			out[key[0]][key[1]] = map[string]result{}
		}
		res := result{}
		for unit, vs := range m {
			res[unit] = median(vs)
		}
		out[key[0]][key[1]][key[2]] = res
	}
	return out, nil
}

// median of vs, which is not empty.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
