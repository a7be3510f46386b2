package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/apigate/ratelimit/bench
cpu: AMD EPYC
BenchmarkRedis/hot-key-1g/ours-2         	     200	    200000 ns/op	    100000 cpu-ns/decision	      5000 decisions/s	         0 err%	        80.00 redis-cpu-us/decision	        30.00 script-us/decision	         1.000 scripts/decision	    1563 B/op	      27 allocs/op
BenchmarkRedis/hot-key-1g/ours-2         	     200	    100000 ns/op	    100000 cpu-ns/decision	     10000 decisions/s	         0 err%	        80.00 redis-cpu-us/decision	        30.00 script-us/decision	         1.000 scripts/decision	    1563 B/op	      27 allocs/op
BenchmarkRedis/hot-key-1g/ours-2         	     200	    400000 ns/op	    100000 cpu-ns/decision	      2500 decisions/s	         0 err%	        80.00 redis-cpu-us/decision	        30.00 script-us/decision	         1.000 scripts/decision	    1563 B/op	      27 allocs/op
BenchmarkRedis/hot-key-1g/redis_rate-2   	     200	    150000 ns/op	     80000 cpu-ns/decision	      6666 decisions/s	         0 err%	        70.00 redis-cpu-us/decision	        35.00 script-us/decision	         1.000 scripts/decision	     688 B/op	      22 allocs/op
BenchmarkRedis/hot-key-1g/throttled-2    	     200	     50000 ns/op	     80000 cpu-ns/decision	     20000 decisions/s	        70.00 err%	        70.00 redis-cpu-us/decision	        35.00 script-us/decision	         1.000 scripts/decision	     688 B/op	      22 allocs/op
--- BENCH: BenchmarkRedis/hot-key-1g/throttled-2
    redis_test.go:150: 140 of 200 decisions failed; the first: Failed to store updated rate limit data
BenchmarkMemory/hot-key-1g/ours-2 	  733726	       200.2 ns/op	       0 B/op	       0 allocs/op
BenchmarkMemory/hot-key-1g/xtime-rate-2 	  733726	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkMiddleware/gin/bare 	 1000000	       110 ns/op	       0 B/op	       0 allocs/op
BenchmarkMiddleware/gin/ours 	 1000000	      2200 ns/op	     160 B/op	      10 allocs/op
BenchmarkMiddleware/gin/peer 	 1000000	      2000 ns/op	     232 B/op	      13 allocs/op
PASS
`

func TestParse(t *testing.T) {
	rs, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	ours := rs["Redis"]["hot-key-1g"]["ours"]
	assert.Equal(t, 200000.0, ours["ns/op"], "the median of three runs")
	assert.Equal(t, 5000.0, ours["decisions/s"])
	assert.Equal(t, 27.0, ours["allocs/op"])
	assert.Equal(t, 70.0, rs["Redis"]["hot-key-1g"]["throttled"]["err%"])
	assert.Equal(t, 110.0, rs["Middleware"]["gin"]["bare"]["ns/op"], "a name without the GOMAXPROCS suffix")
	assert.Len(t, rs["Redis"]["hot-key-1g"], 3, "the BENCH log lines are not results")

	_, err = parse(strings.NewReader("BenchmarkRedis/a/b 10 x ns/op\n"))
	require.ErrorContains(t, err, "ns/op")
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	assert.Equal(t, 7.0, median([]float64{7}))
}

func TestNumber(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 27: "27", 1234567: "1,234,567", 1234.6: "1,235", 123.4: "123",
		12.34: "12.3", 1.234: "1.23", 0.1234: "0.123", -4321: "-4,321",
	} {
		assert.Equal(t, want, number(v), "%v", v)
	}
}

func TestRender(t *testing.T) {
	rs, err := parse(strings.NewReader(sample))
	require.NoError(t, err)
	var w bytes.Buffer
	for _, tb := range sections["redis"][:1] {
		tb.render(&w, rs)
	}
	out := w.String()
	// throttled errred, so the ratio compares ours with redis_rate only;
	// ulule was not measured.
	assert.Contains(t, out, "| one hot key, 1 goroutine | 5,000/s | 6,666/s | n/a | 20,000/s (70% errors) | n/a | 0.75 |")
	assert.Contains(t, out, "| 10,000 keys, 1 goroutine | n/a | n/a | n/a | n/a | n/a | n/a |")

	w.Reset()
	sections["middleware"][1].render(&w, rs)
	assert.Contains(t, w.String(), "| Gin (peer: ulule/limiter's Gin middleware) | 0 allocs, 0 B | 10 allocs (+10), 160 B | n/a | n/a | 13 allocs (+13), 232 B | n/a | n/a | 0.77 |")

	w.Reset()
	sections["memory"][1].render(&w, rs)
	assert.Contains(t, w.String(), "| one hot key, 1 goroutine | 0 allocs, 0 B | 0 allocs, 0 B | n/a | n/a | 1.00 |")
}

func TestRunFromFile(t *testing.T) {
	in := filepath.Join(t.TempDir(), "out.txt")
	require.NoError(t, os.WriteFile(in, []byte(sample), 0o644))
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-in", in, "-section", "middleware"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "- CPU: AMD EPYC")
	assert.Contains(t, stdout.String(), "#### Middleware: ns per request")
	assert.NotContains(t, stdout.String(), "#### Redis")
}

func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseFlags([]string{"-quick", "-section", "memory, redis"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, "100ms", o.benchtime)
	assert.Equal(t, []string{"memory", "redis"}, o.sections)

	o, err = parseFlags(nil, &stderr)
	require.NoError(t, err)
	assert.Equal(t, sectionNames, o.sections)
	assert.Equal(t, "1s", o.benchtime)

	for _, args := range [][]string{{"-section", "disk"}, {"-count", "0"}, {"extra"}} {
		_, err := parseFlags(args, &stderr)
		assert.Error(t, err, "%q", args)
	}
	_, err = parse(strings.NewReader(""))
	require.NoError(t, err)
	err = run(context.Background(), []string{"-in", filepath.Join(t.TempDir(), "missing")}, &stderr, &stderr)
	require.Error(t, err)
}

func TestCPUModel(t *testing.T) {
	assert.Equal(t, "AMD EPYC 7B13", cpuModel([]byte("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")))
	assert.Empty(t, cpuModel([]byte("processor : 0\n")))
}

func TestSplice(t *testing.T) {
	doc := "# t\n\n" + beginMarker + "\nold\n" + endMarker + "\nafter\n"
	out, err := splice([]byte(doc), []byte("new\n"))
	require.NoError(t, err)
	assert.Equal(t, "# t\n\n"+beginMarker+"\nnew\n"+endMarker+"\nafter\n", string(out))

	_, err = splice([]byte("no markers\n"), nil)
	require.Error(t, err)
	_, err = splice([]byte(endMarker+"\n"+beginMarker+"\n"), nil)
	require.Error(t, err)

	path := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
	in := filepath.Join(t.TempDir(), "out.txt")
	require.NoError(t, os.WriteFile(in, []byte(sample), 0o644))
	var stdout bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-in", in, "-section", "memory", "-readme", path}, &stdout, &stdout))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), "#### Memory: ns per decision")
	assert.True(t, strings.HasSuffix(string(b), endMarker+"\nafter\n"))
}
