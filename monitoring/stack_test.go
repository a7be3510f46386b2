//go:build unix

package monitoring_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/gobuild"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/monitoring"
)

// What the examples share (examples/internal/demo, which is internal to
// examples/): the banner's line with the URL, the API key header and the
// limits. A change there fails these tests loudly.
const (
	demoListening    = "listening on " // demo.ListeningPrefix
	demoAPIKeyHeader = "X-API-Key"     // demo.APIKeyHeader
	demoGlobalBurst  = 20              // demo.DefaultPolicies().Global capacity, per client IP
	demoLoginLimit   = 5               // demo.DefaultPolicies().Login.Limit, per client IP in 15 minutes
)

// stackJob is the job name the scrape config gives the example.
const stackJob = "ratelimit-example"

// stack is an example app and a real Prometheus scraping its /metrics every
// second, with the repo's rules loaded and evaluated every second.
type stack struct {
	app  string // the example's base URL: "http://127.0.0.1:PORT"
	prom string // Prometheus's base URL
	http *http.Client
}

// need returns the path of the command name, or skips the test without it;
// under CI=true a missing command fails the test instead, so that CI never
// passes by skipping.
func need(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (CI=true: not skipping); %s", name, install)
	}
	t.Skipf("%s not found; %s", name, install)
	return ""
}

// startStack builds the chi example, runs it on a free loopback port with
// the memory store, starts Prometheus on another with a config scraping the
// example and loading the rules of monitoring.Files, and returns once Prometheus has
// scraped the example successfully. Both processes are killed when the test
// ends.
func startStack(t *testing.T, ctx context.Context) *stack {
	t.Helper()
	promBin := need(t, "prometheus", "install it with `apt-get install prometheus` (.ci/run does)")
	need(t, "go", "the test builds an example with the go command")
	dir := t.TempDir() // before the processes: cleanups run last in, first out

	// Built as this test binary was (gobuild: with -race under -race,
	// sharing the packages the test run compiled).
	bin := filepath.Join(dir, "chi-example")
	gobuild.Build(t, ".", bin, "github.com/apigate/ratelimit/examples/chi")

	// The example: ADDR=127.0.0.1:0, the banner tells the port; no
	// REDIS_URL: the memory store.
	app := startProcess(t, "example", bin, append(environWithout("ADDR", "REDIS_URL"), "ADDR=127.0.0.1:0"))
	line := app.waitFor(t, demoListening, 20*time.Second)
	base := strings.TrimSpace(line[strings.Index(line, demoListening)+len(demoListening):])
	u, err := url.Parse(base)
	require.NoError(t, err, "the banner's URL %q", base)
	require.Equal(t, "127.0.0.1", u.Hostname(), "the example listens on %s, want loopback", base)

	rulesYAML, err := fs.ReadFile(monitoring.Files, "prometheus/ratelimit-rules.yml")
	require.NoError(t, err, "monitoring.Files")
	rules := filepath.Join(dir, "ratelimit-rules.yml")
	require.NoError(t, os.WriteFile(rules, rulesYAML, 0o600))
	config := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: %q
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, rules, stackJob, u.Host)), 0o600))

	// A free port, then Prometheus on it; another process may take the
	// port in between, so a Prometheus that exits at once is retried on
	// another.
	var prom string
	for attempt := 1; prom == ""; attempt++ {
		port := freePort(t)
		p := startProcess(t, "prometheus", promBin, nil,
			"--config.file="+config,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data%d", attempt)),
			"--web.listen-address=127.0.0.1:"+port,
			"--log.level=warn",
		)
		base := "http://127.0.0.1:" + port
		err := poll(ctx, 20*time.Second, 50*time.Millisecond, func() (bool, string) {
			select {
			case <-p.exited:
				return true, "exited"
			default:
			}
			res, err := http.Get(base + "/-/ready")
			if err != nil {
				return false, err.Error()
			}
			_ = res.Body.Close()
			return res.StatusCode == http.StatusOK, res.Status
		})
		require.NoError(t, err, "Prometheus ready; its output:\n%s", p.out.String())
		select {
		case <-p.exited:
			require.Less(t, attempt, 3, "Prometheus exited at start; its output:\n%s", p.out.String())
			continue
		default:
		}
		prom = base
	}

	s := &stack{app: base, prom: prom, http: &http.Client{Timeout: testwait.D(5 * time.Second)}}
	err = poll(ctx, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
		r, err := s.query(ctx, fmt.Sprintf(`up{job=%q}`, stackJob))
		if err != nil {
			return false, err.Error()
		}
		if len(r) != 1 || r[0].Value != 1 {
			return false, fmt.Sprintf("up = %v", r)
		}
		return true, ""
	})
	require.NoError(t, err, "Prometheus scraping the example")
	return s
}

// sample is one series of a query's result, at one instant.
type sample struct {
	Metric map[string]string
	Value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%v", s.Metric, s.Value) }

// promResponse is the envelope of Prometheus's HTTP API.
type promResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// promError is a query Prometheus refused (status "error").
type promError struct{ Type, Msg string }

func (e *promError) Error() string { return e.Type + ": " + e.Msg }

// api POSTs form to Prometheus's path (or GETs it, form nil) and decodes the data of a successful
// answer into data.
func (s *stack) api(ctx context.Context, path string, form url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.prom+path, nil)
	if form != nil {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, s.prom+path, strings.NewReader(form.Encode()))
	}
	if err != nil {
		return err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var r promResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("%s %s: %s: %w", path, res.Status, bytes.TrimSpace(body), err)
	}
	if r.Status != "success" {
		return &promError{Type: r.ErrorType, Msg: r.Error}
	}
	return json.Unmarshal(r.Data, data)
}

// query evaluates expr now through /api/v1/query; a scalar is one sample
// without labels.
func (s *stack) query(ctx context.Context, expr string) ([]sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	switch data.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		out := make([]sample, len(v))
		for i, e := range v {
			f, err := sampleValue(e.Value)
			if err != nil {
				return nil, err
			}
			out[i] = sample{Metric: e.Metric, Value: f}
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		f, err := sampleValue(v)
		if err != nil {
			return nil, err
		}
		return []sample{{Value: f}}, nil
	}
	return nil, fmt.Errorf("result type %q, want vector or scalar", data.ResultType)
}

// rangeSeries is one series of a range query.
type rangeSeries struct {
	Metric map[string]string
	T      []time.Time
	V      []float64
}

// queryRange evaluates expr from start to end every step through
// /api/v1/query_range.
func (s *stack) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]rangeSeries, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	}
	form := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1e3, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1e3, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	if err := s.api(ctx, "/api/v1/query_range", form, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "matrix" {
		return nil, fmt.Errorf("result type %q, want matrix", data.ResultType)
	}
	out := make([]rangeSeries, len(data.Result))
	for i, r := range data.Result {
		out[i].Metric = r.Metric
		for _, v := range r.Values {
			ts, ok := v[0].(float64)
			if !ok {
				return nil, fmt.Errorf("timestamp %v", v[0])
			}
			f, err := sampleValue(v)
			if err != nil {
				return nil, err
			}
			out[i].T = append(out[i].T, time.UnixMilli(int64(math.Round(ts*1e3))))
			out[i].V = append(out[i].V, f)
		}
	}
	return out, nil
}

// sampleValue decodes the value of a [timestamp, "value"] pair.
func sampleValue(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v, want a string", v[1])
	}
	return strconv.ParseFloat(s, 64) // also "NaN", "+Inf", "-Inf"
}

// ruleHealth is a rule as /api/v1/rules reports it.
type ruleHealth struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	Type      string `json:"type"`
}

// rules returns every rule Prometheus loaded.
func (s *stack) rules(ctx context.Context) ([]ruleHealth, error) {
	var data struct {
		Groups []struct {
			Rules []ruleHealth `json:"rules"`
		} `json:"groups"`
	}
	if err := s.api(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []ruleHealth
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

// poll calls f every interval until it reports done, at most
// testwait.D(timeout) (or until ctx ends); the error then carries f's
// last reason.
func poll(ctx context.Context, timeout, interval time.Duration, f func() (done bool, why string)) error {
	timeout = testwait.D(timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		done, why := f()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not done after %v: %s", timeout, why)
		case <-tick.C:
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	return port
}

// process is a command the test started, its output collected.
type process struct {
	name   string
	out    *syncBuffer
	exited chan struct{}
}

// startProcess starts bin with args (env nil: the test's environment) and
// kills it when the test ends, logging its output if the test failed.
func startProcess(t *testing.T, name, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{name: name, out: new(syncBuffer), exited: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start(), "starting %s", name)
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// waitFor waits, at most testwait.D(timeout), for a line of p's output
// containing s, and returns the line.
func (p *process) waitFor(t *testing.T, s string, timeout time.Duration) string {
	t.Helper()
	timeout = testwait.D(timeout)
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		out := p.out.String()
		if i := strings.Index(out, s); i >= 0 {
			start := strings.LastIndexByte(out[:i], '\n') + 1
			if end := strings.IndexByte(out[i:], '\n'); end >= 0 {
				return out[start : i+end]
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before printing %q:\n%s", p.name, s, p.out.String())
		case <-deadline:
			t.Fatalf("%s did not print %q within %v:\n%s", p.name, s, timeout, p.out.String())
		case <-tick.C:
		}
	}
}

// environWithout returns the environment without the named variables.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if name == n {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// syncBuffer is a log or output destination one goroutine writes while
// another reads it.
type syncBuffer = syncbuf.Buffer

// clientFrom returns an HTTP client whose connections leave from the
// loopback address ip ("127.0.0.2"), which the example sees as the client
// IP: each such client has quotas of its own. An empty ip lets the kernel
// choose (127.0.0.1).
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if ip != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	return &http.Client{
		Timeout:   testwait.D(5 * time.Second),
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4},
	}
}
